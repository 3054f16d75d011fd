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

Speculative decoding (`speculation`, spec_decode.py) changes no rule, only what a decode asks
for: the token it sampled plus the drafts proposed after it, cut to the budget and to
`max_model_len`; its blocks also cover the proposer's lookahead slots; a draft model makes every
scheduled request cost one more token of budget (vLLM 0.30.0's `input_budget`; 0.18.0 instead
took `max_num_seqs` tokens off the budget up front). After the step the rejected drafts are
given back (`_verify`) and the proposer drafts again for every request that sampled.

Prefix caching (kv_cache.py) changes only admission: the head of WAITING first looks up the
longest run of its blocks already cached; those tokens count as computed, so only the rest asks
for budget, and the blocks it found that nobody holds count against the free ones.

Those rules, one request at a time, are `_schedule_running`, `_schedule_waiting` and
`update_from_output`. Most steps need no such care for the running decodes: each gets exactly one
token, and only the few that cross a block boundary or finish change anything. So when every
running decode will surely get its token (the budget covers them, they all come before the
running prompts, and the pool holds their new blocks and the prompts'), the step schedules them
in bulk (`_schedule_running_in_bulk`, with the bookkeeping in running_decodes.py) and decides
exactly what the rules would; otherwise it hands them back and follows the rules.

Chunked prefill is not a second scheduler: it is `enable_chunked_prefill`, one flag read in one
place. Left out of vLLM: priorities, async scheduling, encoder inputs, LoRA, and the extra null
block vLLM keeps in its pool.
"""

from collections import deque
from typing import Iterator, Optional

from batch import AdmissionLimit, DecodeRun, PrefixLookup, SchedulerOutput, StepResult
from kv_cache import PagedKVCache
from request import Request, reject_if_it_can_never_run
from running_decodes import RunningDecodes
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
        # -- bookkeeping for the bulk path (speed only; the rules above decide the same) --
        # False: every request one at a time (observers need them all). A speculating decode
        # advances 1 + accepted tokens a step, drawn per request, which the group's one token
        # a step for all (running_decodes.py) cannot follow: speculation takes the rules.
        self.bulk_decodes = not speculation.num_speculative_tokens
        self.decodes = RunningDecodes(max_model_len, kv_cache.block_size)
        self._admission_order: dict[Request, int] = {}  # running request -> when admitted
        self._num_admitted = 0

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
        self.running.append(request)
        self._admission_order[request] = self._num_admitted
        self._num_admitted += 1

    def next_wakeup_s(self) -> None:
        """Continuous batching never waits on a timer: an idle engine waits for an arrival."""
        return None

    @property
    def num_free_blocks(self) -> int:
        return self.kv_cache.num_free_blocks

    # -- one step -----------------------------------------------------------------------------

    def schedule(self, now_s: float) -> SchedulerOutput:
        output = SchedulerOutput()
        token_budget = self.max_num_batched_tokens
        first = 0  # RUNNING from here on is scheduled one request at a time
        if self._decodes_can_go_in_bulk(token_budget):
            token_budget = self._schedule_decodes_in_bulk(output, token_budget)
            first = len(self.decodes)
        else:
            self.decodes.release_all()  # every request by the rules, this step
        token_budget = self._schedule_running(output, token_budget, first)
        if not output.preempted:
            self._schedule_waiting(output, token_budget)
        elif self.waiting:
            output.admission_limit = AdmissionLimit.KV_BLOCKS  # the pool ran out this step
        return output

    def _schedule_running(self, output: SchedulerOutput, token_budget: int, first: int) -> int:
        """RUNNING in admission order from index `first` (the decodes before it were scheduled
        in bulk, one token each, by `_schedule_decodes_in_bulk`)."""
        index, draft_slots = first, self.speculation.num_draft_slots
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
            token_budget -= num_new_tokens + draft_slots
            index += 1
        return token_budget

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
        if request in self.decodes:
            self.decodes.remove(request)  # its own counters, synced
        self.kv_cache.free(request, preempted=True)  # its blocks stay findable until reused
        del self._admission_order[request]
        request.preempt()
        self.waiting.appendleft(request)

    def _schedule_waiting(self, output: SchedulerOutput, token_budget: int) -> None:
        """WAITING in order while the head fits; `output.admission_limit` says what kept out the
        first one that did not (FCFS: nobody overtakes it)."""
        draft_slots = self.speculation.num_draft_slots
        while self.waiting:
            limit = self._batch_limit(token_budget - draft_slots)
            if limit is not None:
                output.admission_limit = limit
                return
            request = self.waiting[0]
            cached_blocks = self.kv_cache.find_cached_prefix(request)  # prefix caching
            limit = self._head_limit(request, token_budget - draft_slots, cached_blocks)
            if limit is not None:
                output.admission_limit = limit
                return
            num_cached_tokens = len(cached_blocks) * self.kv_cache.block_size
            num_new_tokens = min(self._cap_long_prefill(request.num_tokens - num_cached_tokens),
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
            self.running.append(request)
            self._admission_order[request] = self._num_admitted
            self._num_admitted += 1
            output.add(request, num_new_tokens, num_cached_tokens)
            if self.kv_cache.enable_prefix_caching:
                output.prefix_lookups.append(PrefixLookup(
                    request.request_id, request.num_tokens, num_cached_tokens,
                    resumed=request.num_preemptions > 0))
            token_budget -= num_new_tokens + draft_slots

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
        num_drafts = max(0, request.num_computed_tokens + num_new_tokens - request.num_tokens)
        request.num_draft_tokens = 0
        return num_drafts

    # -- the running decodes in bulk (speed only) ---------------------------------------------

    def _decodes_can_go_in_bulk(self, token_budget: int) -> bool:
        """The budget gives every running decode its token, and no decode comes after a running
        request outside the group (a prompt chunk, a recomputation, a decode skipped last step):
        then the rules give each decode exactly one token, in the group's own order."""
        decodes, num_decodes = self.decodes, len(self.decodes)
        if not self.bulk_decodes or num_decodes > token_budget:
            return False
        for index in range(num_decodes, len(self.running)):  # the others: are they last?
            if self.running[index] in decodes:
                return False
        return True

    def _schedule_decodes_in_bulk(self, output: SchedulerOutput, token_budget: int) -> int:
        """One token for every running decode. Those that fill their last block take a new one,
        in running order; returns the budget left."""
        kv_cache, decodes = self.kv_cache, self.decodes
        crossing = sorted(decodes.crossing_now(), key=self._admission_order.__getitem__)
        if len(crossing) <= kv_cache.num_free_blocks:  # the pool holds them all: most steps
            kv_cache.append_blocks([request.request_id for request in crossing])
        else:
            self._append_blocks_or_preempt(crossing, output)
        if kv_cache.enable_prefix_caching:
            self._register_completed_blocks(decodes.step)
        num_decodes = len(decodes)
        kv_cache.add_decode_tokens(num_decodes)
        output.add_decodes(num_decodes, decodes.num_context_tokens)
        return token_budget - num_decodes

    def _register_completed_blocks(self, step: int) -> None:
        """The decodes that fill their last block in the step starting at group step `step` (the
        ones crossing into a new block at the next) register it, as allocate_slots would."""
        decodes = self.decodes
        filling = [request for request in decodes.crossing_at(step + 1) if request.has_known_outputs]
        for request in sorted(filling, key=self._admission_order.__getitem__):
            self.kv_cache.register_completed_block(request, decodes.num_computed_tokens(request) + 1)

    def _append_blocks_or_preempt(self, crossing: list[Request], output: SchedulerOutput) -> None:
        """A block each for the crossing decodes, in running order, preempting from the back of
        RUNNING when the pool is empty, as `_allocate_or_preempt` does; a decode that has to
        preempt itself ends the loop there (everybody after it went before it)."""
        for request in crossing:
            if request not in self.decodes:
                continue  # preempted while an earlier decode looked for a block
            while not self.kv_cache.num_free_blocks:
                victim = self.running.pop()  # the most recently admitted
                self._preempt(victim)
                output.preempted.append(victim)
                if victim is request:
                    return
            self.kv_cache.append_blocks([request.request_id])

    def identical_decode_steps(self) -> Optional[DecodeRun]:
        """The coming steps, while they are sure to be the same: every running request a decode
        in the group, nobody admissible (the blocks only shrink while decodes run, so a head
        that does not fit now will not fit then), nobody finishing, and the pool holding the
        crossing decodes' new blocks. None when the next step is not such a step.

        With prefix caching, a head that does not fit stays so too: the blocks decodes take can
        only evict what it would find, and a free block it finds costs a block all the same.
        Unless a decode fills a block of tokens known in advance (a recorded answer): that block
        is registered, and the head may find it."""
        decodes, num_decodes = self.decodes, len(self.decodes)
        if not (self.bulk_decodes and num_decodes and len(self.running) == num_decodes):
            return None
        token_budget = self.max_num_batched_tokens - num_decodes
        if token_budget < 0:
            return None
        limit = None
        if self.waiting:
            limit = self._waiting_limit(token_budget)
            if limit is None:
                return None  # the head could be admitted
        if decodes.finishes_at(decodes.step + 1):
            return None
        if self.waiting and self.kv_cache.enable_prefix_caching and any(
                request.has_known_outputs for request in self.running):
            return None
        return DecodeRun(self._decode_run_slots(), num_decodes, num_decodes,
                         decodes.num_context_tokens, 0, decodes.last_sample_s,
                         admission_limit=limit)

    def _waiting_limit(self, token_budget: int) -> Optional[AdmissionLimit]:
        """What keeps the head of WAITING out now, through the coming decode-only steps too; None
        if it could be admitted now, or if its reason might change while decodes run.

        The budget and the batch stay as they are, and the free blocks only shrink, so the head
        stays out, for the same reason, with one exception: without chunked prefill, a head that
        waits for blocks while it finds some cached may lose those to the decodes' new blocks,
        and then wait for the budget instead. Such a step takes the rules (speed only)."""
        limit = self._batch_limit(token_budget)
        if limit is not None:
            return limit
        head = self.waiting[0]
        cached_blocks = self.kv_cache.find_cached_prefix(head)
        limit = self._head_limit(head, token_budget, cached_blocks)
        if limit is AdmissionLimit.KV_BLOCKS and cached_blocks and not self.enable_chunked_prefill:
            return None
        return limit

    def _decode_run_slots(self) -> Iterator[int]:
        """Slots each coming decode-only step reserves, until one would finish somebody or the
        pool could not hold its crossing decodes' blocks."""
        decodes = self.decodes
        num_free_blocks = self.kv_cache.num_free_blocks
        step = decodes.step
        while not decodes.finishes_at(step + 1):
            num_crossing = len(decodes.crossing_at(step))
            if num_crossing > num_free_blocks:
                return
            num_free_blocks -= num_crossing
            yield num_crossing * self.kv_cache.block_size
            step += 1

    def apply_decode_run(self, run: DecodeRun, step_ends_s: list[float]) -> None:
        """The engine ran len(step_ends_s) steps of `run`: what schedule and update would have
        done to the decodes in each of them, in order."""
        for end_s in step_ends_s:
            crossing = sorted(self.decodes.crossing_now(), key=self._admission_order.__getitem__)
            self.kv_cache.append_blocks([request.request_id for request in crossing])
            if self.kv_cache.enable_prefix_caching:
                self._register_completed_blocks(self.decodes.step)
            self.kv_cache.add_decode_tokens(run.num_seqs)
            self.decodes.advance(end_s)

    # -- after the forward pass -------------------------------------------------------------

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        result = StepResult()
        if output.num_bulk_decodes:
            self._advance_decodes(result, now_s)
        for scheduled in output.scheduled:
            request = scheduled.request
            request.num_computed_tokens += scheduled.num_new_tokens
            if request.num_computed_tokens < request.num_tokens:
                continue  # a prompt chunk: the model samples nothing until the prompt is done
            if scheduled.num_draft_tokens:
                finished = self._verify(request, scheduled.num_draft_tokens, result, now_s)
            else:
                finished = result.sample(request, now_s, self.max_model_len)
            if finished:
                self._free_finished(request)  # its blocks return to the pool at once
                continue
            request.num_draft_tokens = self.speculation.num_speculative_tokens  # drafted now
            if self.bulk_decodes:
                self.decodes.join(request)
        return result

    def _verify(self, request: Request, num_drafts: int, result: StepResult,
                now_s: float) -> bool:
        """The target checked `num_drafts` drafts: it keeps the accepted ones and its own next
        token, and takes the rejected ones back from `num_computed_tokens` (vLLM's
        update_from_output). Accepted tokens past the request's output length are dropped, as
        vLLM's stop check drops them. Returns whether the request finished."""
        num_accepted = self.speculation.num_accepted(num_drafts)
        num_rejected = num_drafts - num_accepted
        request.num_computed_tokens -= num_rejected
        self.kv_cache.drop_rejected_drafts(num_rejected)
        result.verified.append((request, num_drafts, num_accepted))
        num_tokens = min(1 + num_accepted, request.max_tokens - request.num_output_tokens)
        return result.sample(request, now_s, self.max_model_len, num_tokens)

    def _advance_decodes(self, result: StepResult, now_s: float) -> None:
        """The decode group's step: one token each, the same gap for each, a few finish."""
        itl_s, num_sampled, last_tokens = self.decodes.advance(now_s)
        result.num_bulk_sampled = num_sampled
        result.itls.append((itl_s, num_sampled))
        for request in sorted(last_tokens, key=self._admission_order.__getitem__):
            result.finish_if_done(request, self.max_model_len)
            self._free_finished(request)

    def _free_finished(self, request: Request) -> None:
        self.kv_cache.free(request)
        del self._admission_order[request]
        self.running.remove(request)
