"""Batching as it was before iteration-level scheduling: the world continuous batching replaced.

STATIC ("dynamic batching" in older servers) forms a batch from up to `max_batch_size` waiting
requests, once that many wait or the oldest has waited `batching_window_s`. Then the batch runs
to the end as one unit:

    step 1      every prompt padded to the longest prompt, all computed at once
    step 2..k   one token per member per step, until the longest output is done;
                a member that finished early keeps computing padding in its slot
    drain       only when every member is done does the next batch form

    member   prompt  output   step: 1 (prefill)  2    3    4
    "0"        300      3           PPPP--       d    d    .     P real prompt, - padding,
    "1"        600      2           PPPPPP       d    .    .     d decode, . padding decode
    "2"        100      4           PP----       d    d    d

KV is reserved contiguously: `max_model_len` slots per member at batch formation
(`ContiguousKVCache`), so the batch is also capped by how many reservations the pool holds.
NAIVE is this scheduler with a batch of one and no window: one request at a time.

Tokens stream as they are sampled, so a member's TTFT ends at the prefill step and its E2EL at
its own last token; what it costs others is the padding the batch computes and the wait of
everyone queued behind the batch. The recorder counts each loss apart (exercise 1): prompt
padding (`num_prompt_padding_tokens`), decode padding (the rest of `num_padding_tokens`), seats
left empty while requests wait (`num_idle_slots`), and queueing (metrics.py's queue time). (Servers that returned a batch's responses only when it
drained were worse still; servesim does not charge that.) The padded context is priced as
computed; servesim does not cap it at max_model_len.
"""

from collections import deque
from typing import Optional

from batch import SchedulerOutput, StepResult
from kv_cache import ContiguousKVCache
from request import Request, reject_if_it_can_never_run
from running_decodes import RunningDecodes


class StaticBatchScheduler:
    def __init__(self, kv_cache: ContiguousKVCache, *, max_batch_size: int,
                 batching_window_s: float, max_model_len: int):
        self.kv_cache = kv_cache
        self.max_batch_size = min(max_batch_size, kv_cache.max_num_reservations)
        self.batching_window_s = batching_window_s
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.batch: list[Request] = []
        self.prefilled = False      # the batch's (padded) prompts are computed
        self.num_padded_tokens = 0  # tokens each member has computed, padding included
        # The members still owed tokens decode together, one token each per step, until each
        # reaches its end (running_decodes.py keeps their counters); the batch drains when none
        # is left. BulkStaticBatchScheduler (bulk_scheduler.py) counts them without naming them.
        self.unfinished = RunningDecodes(max_model_len)

    # -- requests in and out ------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if not reject_if_it_can_never_run(request, self.max_model_len):
            self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.batch)

    def next_wakeup_s(self) -> Optional[float]:
        """When the oldest waiting request's batching window runs out, if a batch is due."""
        if self.batch or not self.waiting:
            return None
        return self.waiting[0].arrival_s + self.batching_window_s

    @property
    def running(self) -> list[Request]:
        return self.batch

    @property
    def num_free_blocks(self) -> None:
        """Contiguous reservations have no blocks to count."""
        return None

    # -- one step -----------------------------------------------------------------------------

    def schedule(self, now_s: float) -> SchedulerOutput:
        if not self.batch:
            if not self._batch_is_due(now_s):
                return SchedulerOutput()
            return self._form_batch_and_prefill()
        output = SchedulerOutput()
        self._add_members(output)
        output.num_padding_tokens = len(self.batch) - len(self.unfinished)
        output.num_idle_slots = self._num_idle_slots()
        self.kv_cache.fill(len(self.unfinished))  # the unfinished members' tokens are real
        return output

    def _add_members(self, output: SchedulerOutput) -> None:
        """Every member decodes one token, finished ones too: they compute padding."""
        for request in self.batch:
            output.add(request, 1, self.num_padded_tokens)

    def _num_idle_slots(self) -> int:
        """Seats of the running batch that a waiting request could take, were it allowed to
        join: the loss continuous batching removes by admitting at every step."""
        return min(self.max_batch_size - len(self.batch), len(self.waiting))

    def _batch_is_due(self, now_s: float) -> bool:
        if len(self.waiting) >= self.max_batch_size:
            return True
        return bool(self.waiting) and now_s >= self.waiting[0].arrival_s + self.batching_window_s

    def _form_batch_and_prefill(self) -> SchedulerOutput:
        while self.waiting and len(self.batch) < self.max_batch_size:
            request = self.waiting.popleft()
            self.kv_cache.reserve()
            self.kv_cache.fill(request.prompt_len)
            request.admit()
            self.batch.append(request)
        padded_prompt_len = max(r.prompt_len for r in self.batch)
        self.num_padded_tokens = 0
        self.prefilled = False
        output = SchedulerOutput()
        for request in self.batch:
            output.add(request, padded_prompt_len, 0)
            output.num_padding_tokens += padded_prompt_len - request.prompt_len
        output.num_prompt_padding_tokens = output.num_padding_tokens
        output.num_idle_slots = self._num_idle_slots()
        return output

    # -- after the forward pass -------------------------------------------------------------

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        result = StepResult()
        if self.prefilled:
            self._decode_step(result, now_s)
            self.num_padded_tokens += 1
        else:
            self._sample_first_tokens(result, now_s)
            self.num_padded_tokens = output.scheduled[0].num_new_tokens  # the padded prompt
            self.prefilled = True
        if not self.unfinished:
            self._drain()
        return result

    def _sample_first_tokens(self, result: StepResult, now_s: float) -> None:
        """The prefill step: every member's prompt is computed; each samples its first token."""
        for request in self.batch:
            request.num_computed_tokens = request.num_tokens
            if not result.sample(request, now_s, self.max_model_len):
                self.unfinished.join(request)  # its reservation stays until the batch drains

    def _decode_step(self, result: StepResult, now_s: float) -> None:
        """Every unfinished member computed one token and sampled the next."""
        sampled = [request for request in self.batch if request in self.unfinished]
        itl_s, num_sampled, last_tokens = self.unfinished.advance(now_s)
        result.itls.append((itl_s, num_sampled))
        for request in sampled:
            if request in self.unfinished:
                self.unfinished.sync(request)
        result.sampled = sampled
        self._finish(last_tokens, result)

    def _finish(self, last_tokens: list[Request], result: StepResult) -> None:
        """The members whose token this step was their last, in batch order."""
        for request in sorted(last_tokens, key=self.batch.index):
            result.finish_if_done(request, self.max_model_len)

    def _drain(self) -> None:
        for request in self.batch:
            self.kv_cache.free(request.num_computed_tokens)
        self.batch = []
