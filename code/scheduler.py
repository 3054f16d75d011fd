"""Continuous batching and chunked prefill: vLLM V1's scheduler, small in size, same in behaviour.

The one invariant: every request's computed tokens chase its tokens (prompt + outputs so far),
under a per-step token budget. There is no prefill phase and no decode phase; a decode is a
request that is one token behind, a prefill chunk is `min(tokens behind, budget left)`.

Each step (`schedule`) decides, in this order:

1. RUNNING first, in admission order, while budget is left. Each gets what it is behind by (1
   for a decode), capped by `long_prefill_token_threshold` and by the budget. It takes KV blocks
   for the new tokens; if the pool is empty the scheduler preempts the most recently admitted
   running request (frees its blocks, sends it to the front of WAITING to be recomputed) and
   tries again. If the request had to preempt itself, nobody after it runs this step.
2. Then WAITING, first come first served, only if nobody was preempted this step, while budget
   is left and fewer than `max_num_seqs` run. Admission needs free blocks for the request's whole
   current sequence, though it takes only what this step computes. With chunked prefill off a
   prompt that does not fit the budget waits, and so does everybody behind it (head-of-line).
   The step notes what kept the head out (`admission_limit`: the blocks, max_num_seqs or the
   budget), for `diagnose` to read.

`update_from_output` then applies the step: computed tokens advance; a request that caught up
samples one output token; one that reached its output length (or `max_model_len`) finishes and
returns its blocks in that same step.

Speculative decoding (`speculation`, spec_decode.py) changes what a decode asks for: the token
it sampled plus the drafts proposed after it, cut to the budget and to `max_model_len`; its
blocks also cover the proposer's lookahead slots; a newly admitted request with one token to
compute is padded to 1 + k (`_padded_admission`); a draft model makes every
scheduled request cost one more token of budget (vLLM 0.30.0's `input_budget`; 0.18.0 instead
took `max_num_seqs` tokens off the budget up front). After the step the rejected drafts are
given back (`_verify`) and the proposer drafts again for every request that sampled.

Prefix caching (kv_cache.py) changes only admission: the head of WAITING first looks up the
longest run of its blocks already cached; those tokens count as computed, so only the rest asks
for budget, and the blocks it found that nobody holds count against the free ones.

Those rules, one request at a time, are `_schedule_running`, `_schedule_waiting` and
`update_from_output`. They are all this file holds. Most steps need no such care for the running
decodes (each gets exactly one token; only the few that cross a block boundary or finish change
anything): `BulkScheduler` (bulk_scheduler.py, speed only) is this scheduler with the running
decodes counted as a group, deciding exactly what these rules decide.

Chunked prefill is not a second scheduler: it is `enable_chunked_prefill`, one flag read in one
place. Async scheduling (vLLM 0.30.0's default) is a subclass that schedules with the outputs in
flight as placeholders, in async_scheduling.py; this file is the synchronous scheduler it builds
on. Left out of vLLM: priorities, encoder inputs, LoRA, and the extra null block vLLM keeps in
its pool.
"""

from collections import deque
from typing import Optional

from batch import AdmissionLimit, PrefixLookup, ScheduledRequest, SchedulerOutput, StepResult
from kv_cache import PagedKVCache
from request import Request, reject_if_it_can_never_run
from spec_decode import NO_SPECULATION, Speculation


class Scheduler:
    def __init__(self, kv_cache: PagedKVCache, *, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int, enable_chunked_prefill: bool,
                 long_prefill_token_threshold: int = 0,
                 speculation: Speculation = NO_SPECULATION):
        self.kv_cache = kv_cache
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.speculation = speculation
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # -- requests in and out ------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue an arrival, or reject it on the spot if it can never run."""
        if not reject_if_it_can_never_run(request, self.max_model_len):
            self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def receive_remote_kv(self, request: Request) -> None:
        """Prefill/decode disaggregation (disaggregation.py): a request whose prompt KV another
        engine computed, now landed in blocks it already holds, joins RUNNING at the back. Its
        last prompt token is computed here, which samples its first token: vLLM 0.30.0's
        `_update_waiting_for_remote_kv` sets num_computed_tokens to num_tokens - 1 "on a full
        prompt hit". Simplified: vLLM moves the request from WAITING_FOR_REMOTE_KVS back to
        WAITING, to be admitted in its turn; here it runs from the next step."""
        request.admit()
        self._start_running(request)

    def next_wakeup_s(self) -> None:
        """Continuous batching never waits on a timer: an idle engine waits for an arrival."""
        return None

    @property
    def num_free_blocks(self) -> int:
        return self.kv_cache.num_free_blocks

    # -- one step -----------------------------------------------------------------------------

    def schedule(self, now_s: float) -> SchedulerOutput:
        output = SchedulerOutput()
        token_budget, prefill_scheduled = self._schedule_running(output,
                                                                 self.max_num_batched_tokens)
        if not output.preempted:
            self._schedule_waiting(output, token_budget, prefill_scheduled)
        elif self.waiting:
            output.admission_limit = AdmissionLimit.KV_BLOCKS  # the pool ran out this step
        return output

    def _schedule_running(self, output: SchedulerOutput, token_budget: int,
                          first: int = 0) -> tuple[int, bool]:
        """RUNNING in admission order (from index `first`: BulkScheduler schedules the decodes
        before it as a group). Returns the budget left, and whether a request whose previous
        step was a prompt chunk was scheduled."""
        index, draft_slots = first, self.speculation.num_draft_slots
        prefill_scheduled = False
        while index < len(self.running) and token_budget > draft_slots:
            request = self.running[index]
            num_new_tokens = self._num_new_tokens(request, token_budget - draft_slots)
            if num_new_tokens == 0:
                index += 1
                continue
            if not self._allocate_or_preempt(request, num_new_tokens, output):
                break  # it preempted itself: the pool cannot hold even the oldest requests
            output.add(request, num_new_tokens, request.num_computed_tokens,
                       self._take_drafts(request, num_new_tokens))
            prefill_scheduled |= request.is_prefill_chunk  # as its previous step left it
            request.is_prefill_chunk = (request.num_computed_tokens + num_new_tokens
                                        < request.num_tokens + request.num_output_placeholders)
            token_budget -= num_new_tokens + draft_slots
            index += 1
        return token_budget, prefill_scheduled

    def _allocate_or_preempt(self, request: Request, num_new_tokens: int,
                             output: SchedulerOutput) -> bool:
        """Take blocks for the new tokens, preempting from the back of RUNNING until they fit."""
        lookahead = self._num_lookahead_tokens(request.num_computed_tokens + num_new_tokens)
        while not self.kv_cache.allocate_slots(request, request.num_computed_tokens,
                                               num_new_tokens, lookahead):
            victim = self.running.pop()  # the most recently admitted
            self._preempt(victim)
            output.preempted.append(victim)
            if victim is request:
                return False
        return True

    def _preempt(self, request: Request) -> None:
        self.kv_cache.free(request, preempted=True)  # its blocks stay findable until reused
        request.preempt()
        self.waiting.appendleft(request)

    def _schedule_waiting(self, output: SchedulerOutput, token_budget: int,
                          prefill_scheduled: bool = False) -> None:
        """WAITING in order while the head fits; `output.admission_limit` says what kept out the
        first one that did not (FCFS: nobody overtakes it). `prefill_scheduled`: a running
        prompt chunk is in the step (then nobody is padded, see `_padded_admission`)."""
        draft_slots = self.speculation.num_draft_slots
        running_scheduled = not output.is_empty
        while self.waiting:
            limit = self._batch_limit(token_budget - draft_slots)
            if limit is not None:
                output.admission_limit = limit
                return
            request = self.waiting[0]
            cached_blocks = self.kv_cache.find_cached_prefix(request)  # prefix caching
            num_cached_tokens = len(cached_blocks) * self.kv_cache.block_size
            num_padded = self._padded_admission(request, num_cached_tokens, prefill_scheduled,
                                                running_scheduled)
            if num_padded > token_budget - draft_slots:
                output.admission_limit = AdmissionLimit.TOKEN_BUDGET  # vLLM would rather admit
                return                                                # nobody than unpadded
            limit = self._head_limit(request, token_budget - draft_slots, cached_blocks)
            if limit is not None:
                output.admission_limit = limit
                return
            num_new_tokens = num_padded or min(
                self._cap_long_prefill(request.num_tokens - num_cached_tokens),
                token_budget - draft_slots)
            lookahead = self._num_lookahead_tokens(num_cached_tokens + num_new_tokens)
            if lookahead and not self.kv_cache.can_fit(
                    request.request_id, num_cached_tokens + num_new_tokens + lookahead,
                    cached_blocks):
                output.admission_limit = AdmissionLimit.KV_BLOCKS  # its chunk fits, the
                return                                             # lookahead slots do not yet
            self.kv_cache.admit_cached(request, cached_blocks)
            self.kv_cache.allocate_slots(request, num_cached_tokens, num_new_tokens, lookahead)
            self.waiting.popleft()
            request.admit()
            request.found_cached(num_cached_tokens)  # found, not computed (again)
            self._start_running(request)
            num_placeholders = num_padded and self.speculation.num_speculative_tokens
            output.add(request, num_new_tokens, num_cached_tokens, num_placeholders,
                       padded=bool(num_padded))
            request.is_prefill_chunk = num_cached_tokens + num_new_tokens < request.num_tokens
            if self.kv_cache.enable_prefix_caching:
                output.prefix_lookups.append(PrefixLookup(
                    request.request_id, request.num_tokens, num_cached_tokens,
                    resumed=request.num_preemptions > 0))
            token_budget -= num_new_tokens + draft_slots

    def _padded_admission(self, request: Request, num_cached_tokens: int,
                          prefill_scheduled: bool, running_scheduled: bool) -> int:
        """vLLM 0.30.0 pads a newly admitted request that would compute exactly one token (a
        one-token prompt, or all but one token found cached) to 1 + k tokens, with k placeholder
        drafts the sampler always rejects, so that every request of the step has the same
        1 + k shape and the step runs as one CUDA graph. Only when the step is otherwise such a
        decode step (no running prompt chunk; a running request scheduled, or tokens found
        cached) and the padded tokens leave room under max_model_len for the sampled one.
        Returns 1 + k for a padded admission, else 0 (Scheduler.schedule, the "pad" branch)."""
        k = self.speculation.num_speculative_tokens
        if not k or request.num_tokens - num_cached_tokens != 1 or prefill_scheduled:
            return 0
        if not (running_scheduled or num_cached_tokens):
            return 0
        if num_cached_tokens + 1 + k + 1 > self.max_model_len:
            return 0
        return 1 + k

    def _start_running(self, request: Request) -> None:
        """The admitted request joins RUNNING, at its back (the first to be preempted)."""
        self.running.append(request)

    def _batch_limit(self, token_budget: int) -> Optional[AdmissionLimit]:
        """Is the batch full, whoever waits: the token budget spent, or max_num_seqs running?"""
        if token_budget <= 0:
            return AdmissionLimit.TOKEN_BUDGET
        if len(self.running) >= self.max_num_seqs:
            return AdmissionLimit.MAX_NUM_SEQS
        return None

    def _head_limit(self, request: Request, token_budget: int,
                    cached_blocks: list[int]) -> Optional[AdmissionLimit]:
        """Must the head of WAITING wait, given the blocks it found in the prefix cache? Without
        chunked prefill its whole prompt must fit what is left of the budget; and the pool must
        hold its whole current sequence (though it takes only what this step computes)."""
        num_cached_tokens = len(cached_blocks) * self.kv_cache.block_size
        num_new_tokens = self._cap_long_prefill(request.num_tokens - num_cached_tokens)
        if not self.enable_chunked_prefill and num_new_tokens > token_budget:
            return AdmissionLimit.TOKEN_BUDGET  # everybody behind it waits too (head-of-line)
        if not self.kv_cache.can_fit(request.request_id, request.num_tokens, cached_blocks):
            return AdmissionLimit.KV_BLOCKS
        return None

    def _num_new_tokens(self, request: Request, token_budget: int) -> int:
        num_new_tokens = min(self._cap_long_prefill(request.num_tokens_to_compute), token_budget)
        # The last position the model may compute is max_model_len - 1.
        return min(num_new_tokens, self.max_model_len - 1 - request.num_computed_tokens)

    def _cap_long_prefill(self, num_new_tokens: int) -> int:
        threshold = self.long_prefill_token_threshold
        if 0 < threshold < num_new_tokens:
            return threshold
        return num_new_tokens

    def _num_lookahead_tokens(self, num_tokens_after_step: int) -> int:
        """KV slots an EAGLE head or draft model writes past the step's tokens, up to
        max_model_len (0 without such a proposer)."""
        return min(self.speculation.num_lookahead_tokens,
                   self.max_model_len - num_tokens_after_step)

    @staticmethod
    def _take_drafts(request: Request, num_new_tokens: int) -> int:
        """How many of the request's drafts the step verifies: those that fit into its new
        tokens (the budget or max_model_len may cut them). The rest are dropped: the proposer
        drafts afresh after the step."""
        num_drafts = max(0, request.num_computed_tokens + num_new_tokens - request.num_tokens
                         - request.num_output_placeholders)
        request.num_draft_tokens = 0
        return num_drafts

    # -- after the forward pass -------------------------------------------------------------

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        result = StepResult()
        for scheduled in output.scheduled:
            self._apply(scheduled, result, now_s)
        return result

    def _apply(self, scheduled: ScheduledRequest, result: StepResult, now_s: float) -> bool:
        """The step computed the request's new tokens; if it caught up, it sampled. Returns
        whether it sampled and runs on (a decode in the next step)."""
        request = scheduled.request
        request.num_computed_tokens += scheduled.num_new_tokens
        if request.num_computed_tokens < request.num_tokens:
            return False  # a prompt chunk: the model samples nothing until the prompt is done
        if scheduled.num_draft_tokens:
            finished = self._verify(request, scheduled.num_draft_tokens, result, now_s,
                                    scheduled.padded)
        else:
            finished = result.sample(request, now_s, self.max_model_len)
        if finished:
            self._free_finished(request)  # its blocks return to the pool at once
            return False
        request.num_draft_tokens = self.speculation.num_speculative_tokens  # drafted now
        return True

    def _verify(self, request: Request, num_drafts: int, result: StepResult,
                now_s: float, padded: bool = False) -> bool:
        """The target checked `num_drafts` drafts: it keeps the accepted ones and its own next
        token, and takes the rejected ones back from `num_computed_tokens` (vLLM's
        update_from_output). Accepted tokens past the request's output length are dropped, as
        vLLM's stop check drops them. Placeholder drafts (`padded`) are all rejected, with no
        draw. Returns whether the request finished."""
        num_accepted = 0 if padded else self.speculation.num_accepted(num_drafts)
        num_rejected = num_drafts - num_accepted
        request.num_computed_tokens -= num_rejected
        self.kv_cache.drop_rejected_drafts(num_rejected)
        result.verified.append((request, num_drafts, num_accepted))
        num_tokens = min(1 + num_accepted, request.max_tokens - request.num_output_tokens)
        return result.sample(request, now_s, self.max_model_len, num_tokens)

    def _free_finished(self, request: Request) -> None:
        self.kv_cache.free(request)
        self.running.remove(request)
