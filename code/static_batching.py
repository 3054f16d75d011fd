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
everyone queued behind the batch. (Servers that returned a batch's responses only when it
drained were worse still; servesim does not charge that.) The padded context is priced as
computed; servesim does not cap it at max_model_len.
"""

from collections import deque
from typing import Optional

from batch import SchedulerOutput, StepResult
from kv_cache import ContiguousKVCache
from request import Request, reject_if_it_can_never_run


class StaticBatchScheduler:
    def __init__(self, kv_cache: ContiguousKVCache, *, max_batch_size: int,
                 batching_window_s: float, max_model_len: int):
        self.kv_cache = kv_cache
        self.max_batch_size = min(max_batch_size, kv_cache.max_num_reservations)
        self.batching_window_s = batching_window_s
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.batch: list[Request] = []
        self.num_padded_tokens = 0  # tokens each member has computed, padding included
        self.num_unfinished = 0     # members still owed tokens; the batch drains at zero

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
        for request in self.batch:  # finished members too: they keep computing padding
            output.add(request, 1, self.num_padded_tokens)
            if request.is_finished:
                output.num_padding_tokens += 1
            else:
                self.kv_cache.fill(request.request_id, 1)
        return output

    def _batch_is_due(self, now_s: float) -> bool:
        if len(self.waiting) >= self.max_batch_size:
            return True
        return bool(self.waiting) and now_s >= self.waiting[0].arrival_s + self.batching_window_s

    def _form_batch_and_prefill(self) -> SchedulerOutput:
        while self.waiting and len(self.batch) < self.max_batch_size:
            request = self.waiting.popleft()
            self.kv_cache.reserve(request.request_id)
            self.kv_cache.fill(request.request_id, request.prompt_len)
            request.admit()
            self.batch.append(request)
        self.num_unfinished = len(self.batch)
        padded_prompt_len = max(r.prompt_len for r in self.batch)
        self.num_padded_tokens = 0
        output = SchedulerOutput()
        for request in self.batch:
            output.add(request, padded_prompt_len, 0)
            output.num_padding_tokens += padded_prompt_len - request.prompt_len
        return output

    # -- after the forward pass -------------------------------------------------------------

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        result = StepResult()
        for scheduled in output.scheduled:
            request = scheduled.request
            if request.is_finished:
                continue  # padding
            request.num_computed_tokens = request.num_tokens
            if result.sample(request, now_s, self.max_model_len):
                self.num_unfinished -= 1  # its reservation stays until the batch drains
        self.num_padded_tokens += output.scheduled[0].num_new_tokens
        if self.num_unfinished == 0:
            self._drain()
        return result

    def _drain(self) -> None:
        for request in self.batch:
            self.kv_cache.free(request.request_id)
        self.batch = []
