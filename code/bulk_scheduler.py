"""The speed room: the same schedulers, with the running decodes counted as a group.

Nothing here is a rule of vLLM's scheduler. Every rule a learner reads is in scheduler.py (vLLM
V1), async_scheduling.py and static_batching.py (STATIC, NAIVE); the classes here subclass them
and decide exactly what they decide, with less work per step:

    GroupedDecodes            what both schedulers below do with their group (running_decodes.py):
                              RUNNING's admission order, the crossing members' new blocks,
                              runs of identical steps (decode_runs.RunsOfIdenticalSteps)
    BulkScheduler             vLLM V1's rules, with the running decodes kept in bulk whenever
                              the rules would surely give each of them one token: the budget
                              covers them, they all come before the running prompts, and the
                              pool holds their new blocks (or the scheduler preempts as the
                              rules do). Otherwise the step hands them back and follows the
                              rules one request at a time.
    AsyncBulkScheduler        vLLM's async scheduler, the same group with a token in flight for
                              each member: scheduled with the next batch, read with the batch
                              before; a member whose last token is in flight, or that is
                              preempted, leaves, and that token is read alone
    BulkStaticBatchScheduler  STATIC's batch, its decodes counted instead of named

Each offers, after a step, the coming steps it is sure are the same batch
(`identical_decode_steps`): decode_runs.py prices and records them without asking it again.

The mode picks a class here when nobody needs every request of every step (a step log, a
timeline, a block table do; a chart or the metrics do not) and speculative decoding is off (a
speculating decode advances 1 + accepted tokens a step, drawn per request, which the group's one
token a step for all cannot follow). A decode whose outputs are known in advance (a recorded
answer, whose blocks others may find) stays out of the async group, and while one is in the
synchronous group its filled blocks are registered as the rules would. With prefix caching the
pool here leaves out the cache entries nobody could hit (kv_cache.defers_unshared_blocks): no view
reads them. tests/test_bulk_scheduler.py checks that both paths give the same results.
"""

import itertools
from collections import deque
from typing import Optional

from async_scheduling import AsyncScheduler
from batch import AdmissionLimit, DecodeRun, ScheduledRequest, SchedulerOutput, StepResult
from decode_runs import RunsOfIdenticalSteps, decodes_alone
from request import Request, RequestStatus
from running_decodes import RunningDecodes
from scheduler import Scheduler
from static_batching import StaticBatchScheduler


class GroupedDecodes(RunsOfIdenticalSteps):
    """What both bulk schedulers do with their group of running decodes (`self.decodes`): keep
    RUNNING's admission order (the order the rules allocate in), give the group's crossing
    members their blocks, and fast-forward runs of identical steps (decode_runs.py).

    The group's lists (its members, each step's crossing and finishing ones) are already in
    RUNNING's order, with no sorting: a request joins from right behind the group, or is
    admitted after it, so every member was admitted before it, and the lists keep joining
    order (a finishing list is a part of the members' in joining order). commands/invariants.py
    checks the members' and the crossing ones' order after every step of every test's run."""

    def _init_group(self, kv_cache, tokens_in_flight: int) -> None:
        assert not self.speculation.num_speculative_tokens, "speculation takes the rules"
        kv_cache.defers_unshared_blocks = True  # no view reads the cache's entries here
        self.decodes = RunningDecodes(self.max_model_len, kv_cache.block_size, tokens_in_flight)
        self._admission_order: dict[Request, int] = {}  # running request -> when admitted
        self._num_admitted = 0

    def _start_running(self, request: Request) -> None:
        super()._start_running(request)
        self._admission_order[request] = self._num_admitted
        self._num_admitted += 1

    def _free_finished(self, request: Request) -> None:
        del self._admission_order[request]
        super()._free_finished(request)

    def _schedule_decodes_in_bulk(self, output: SchedulerOutput, token_budget: int) -> int:
        """One token for every running decode. Those that fill their last block take a new one,
        in running order; returns the budget left."""
        kv_cache, decodes = self.kv_cache, self.decodes
        crossing = decodes.crossing_now()  # in running order, as the group's lists all are
        if len(crossing) <= kv_cache.num_free_blocks:  # the pool holds them all: most steps
            kv_cache.append_blocks(crossing)
        else:
            self._append_blocks_or_preempt(list(crossing.values()), output)
        if kv_cache.enable_prefix_caching and decodes.num_with_known_outputs:
            self._register_completed_blocks(decodes.step)
        num_decodes = len(decodes)
        kv_cache.fill_slots(num_decodes)  # each decode's next token
        output.add_decodes(num_decodes, decodes.num_context_tokens)
        return token_budget - num_decodes

    def _register_completed_blocks(self, step: int) -> None:
        """The decodes that fill their last block in the step starting at group step `step` (the
        ones crossing into a new block at the next) register it, as allocate_slots would."""
        decodes = self.decodes
        filling = [request for request in decodes.crossing_at(step + 1).values()
                   if request.has_known_outputs]
        for request in filling:
            self.kv_cache.register_completed_block(request, decodes.num_computed_tokens(request) + 1)

    def _append_blocks_or_preempt(self, crossing: list[Request], output: SchedulerOutput) -> None:
        """A block each for the crossing decodes, in running order, preempting from the back of
        RUNNING when the pool is empty, as `_allocate_or_preempt` does; a decode that has to
        preempt itself ends the loop there (everybody after it went before it). Those the
        free blocks hold take them at once: nobody is preempted until the pool is empty."""
        kv_cache, decodes = self.kv_cache, self.decodes
        index = 0
        while index < len(crossing):
            num_free_blocks = kv_cache.num_free_blocks
            if not num_free_blocks:
                request = crossing[index]
                if request not in decodes:
                    index += 1  # preempted while an earlier decode looked for a block
                    continue
                victim = self.running.pop()  # the most recently admitted
                self._preempt(victim)
                output.preempted.append(victim)
                if victim is request:
                    return
                continue
            taking = []
            while index < len(crossing) and len(taking) < num_free_blocks:
                request = crossing[index]
                index += 1
                if request in decodes:  # (else preempted by an earlier decode)
                    taking.append(request.request_id)
            kv_cache.append_blocks(taking)


class BulkScheduler(GroupedDecodes, Scheduler):
    """vLLM V1's scheduler (scheduler.py), its running decodes scheduled as a group."""

    def __init__(self, kv_cache, **rules):
        super().__init__(kv_cache, **rules)
        self._init_group(kv_cache, tokens_in_flight=0)

    # -- the rules' hooks, with the group kept up to date ----------------------------------------

    def _schedule_running(self, output: SchedulerOutput, token_budget: int,
                          first: int = 0) -> tuple[int, bool]:
        if self._decodes_can_go_in_bulk(token_budget):
            token_budget = self._schedule_decodes_in_bulk(output, token_budget)
            first = len(self.decodes)
        else:
            self.decodes.release_all()  # every request by the rules, this step
        return super()._schedule_running(output, token_budget, first)

    def _preempt(self, request: Request) -> None:
        if request in self.decodes:
            self.decodes.remove(request)  # its own counters, synced, before its blocks go
        del self._admission_order[request]
        super()._preempt(request)

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        result = StepResult()
        if output.num_bulk_decodes:
            self._advance_decodes(result, now_s)
        for scheduled in output.scheduled:
            if self._apply(scheduled, result, now_s):
                self.decodes.join(scheduled.request)  # one token behind: a decode next step
        return result

    # -- the running decodes in bulk -----------------------------------------------------------

    def _decodes_can_go_in_bulk(self, token_budget: int) -> bool:
        """The budget gives every running decode its token, and no decode comes after a running
        request outside the group (a prompt chunk, a recomputation, a decode skipped last step):
        then the rules give each decode exactly one token, in the group's own order."""
        decodes, num_decodes = self.decodes, len(self.decodes)
        if num_decodes > token_budget:
            return False
        for index in range(num_decodes, len(self.running)):  # the others: are they last?
            if self.running[index] in decodes:
                return False
        return True

    def _step_group(self, now_s: float) -> None:
        self.decodes.advance(now_s)  # (in a run of identical steps: nobody finishes)

    def _step_group_in_run(self, step_ends_s: list[float]) -> list[Request]:
        """The group steps once per step of a run; only its last step may finish somebody."""
        if not self.decodes.finishes_at(self.decodes.step + len(step_ends_s)):
            self.decodes.advance_without_finishes(len(step_ends_s), step_ends_s[-1])
            return []
        if len(step_ends_s) > 1:
            self.decodes.advance_without_finishes(len(step_ends_s) - 1, step_ends_s[-2])
        result = StepResult()
        self._advance_decodes(result, step_ends_s[-1])
        return result.finished

    def _advance_decodes(self, result: StepResult, now_s: float) -> None:
        """The decode group's step: one token each, the same gap for each, a few finish."""
        itl_s, num_sampled, last_tokens = self.decodes.advance(now_s)
        result.num_bulk_sampled = num_sampled
        result.itls.append((itl_s, num_sampled))
        for request in last_tokens:
            result.finish_if_done(request, self.max_model_len)
            self._free_finished(request)

    # -- identical steps in a row ----------------------------------------------------------------

    def identical_decode_steps(self, wider: bool = True) -> Optional[DecodeRun]:
        """The coming steps, while they are sure to be the same: every running request a decode
        in the group, nobody admissible (the blocks only shrink while decodes run, so a head
        that does not fit now will not fit then), nobody finishing, and the pool holding the
        crossing decodes' new blocks. None when the next step is not such a step. `wider`:
        the step that finishes somebody ends the run instead of breaking it (it is scheduled
        as the others; the finished are freed after it), and runs of a prompt's chunks too.

        With prefix caching, a head that does not fit stays so too: the blocks decodes take can
        only evict what it would find, and a free block it finds costs a block all the same.
        Unless a decode fills a block of tokens known in advance (a recorded answer): that block
        is registered, and the head may find it.

        With somebody waiting, an arrival during the run waits behind that head, for whom
        nothing changes (`arrivals_wait`). Or the group and one running prompt behind it, while
        its chunk spends the rest of the budget (`decodes_and_a_chunk`)."""
        decodes, num_decodes = self.decodes, len(self.decodes)
        if wider and num_decodes and len(self.running) == num_decodes + 1:
            return self.decodes_and_a_chunk(num_decodes)
        if not (num_decodes and len(self.running) == num_decodes):
            return None
        alone, limit = decodes_alone(self, num_decodes)
        if not alone:
            return None
        if not wider and decodes.finishes_at(decodes.step + 1):
            return None
        if self.waiting and self.kv_cache.enable_prefix_caching and decodes.num_with_known_outputs:
            return None  # (every running request is in the group)
        return DecodeRun(self._decode_run_slots(through_a_finish=wider), num_decodes,
                         num_decodes, decodes.num_context_tokens, 0, decodes.last_sample_s,
                         admission_limit=limit, arrivals_wait=bool(self.waiting))

    def decodes_and_a_chunk(self, num_decodes: int) -> Optional[DecodeRun]:
        """The coming steps of the group and the one running prompt behind it in RUNNING, while
        they are sure to be the same: the budget the decodes leave is the prompt's chunk, all of
        it (so WAITING's head waits for the budget, as do arrivals), and does not end the prompt;
        the pool holds the decodes' and the chunk's new blocks; up to a step that finishes
        somebody."""
        decodes, prompt = self.decodes, self.running[-1]
        num_prompt_tokens = self.max_num_batched_tokens - num_decodes
        if (prompt in decodes
                or (self.kv_cache.enable_prefix_caching and decodes.num_with_known_outputs)
                or not self._chunk_spends_budget(prompt, prompt.num_computed_tokens,
                                                 num_prompt_tokens)):
            return None
        limit = AdmissionLimit.TOKEN_BUDGET if self.waiting else None
        return DecodeRun(self._decode_run_slots(prompt, num_prompt_tokens, True), num_decodes,
                         num_decodes, decodes.num_context_tokens, 0, decodes.last_sample_s,
                         admission_limit=limit, prompt=prompt,
                         num_prompt_tokens=num_prompt_tokens,
                         prompt_context_tokens=prompt.num_computed_tokens, arrivals_wait=True)


class AsyncBulkScheduler(GroupedDecodes, AsyncScheduler):
    """vLLM's async scheduler (async_scheduling.py), its running decodes scheduled and read as a
    group; the engine fast-forwards runs of identical decode-only steps.

    A member is a running decode that, between two passes of the batch queue, holds one output
    placeholder (its token sampled by the batch in flight) and has computed every token it
    knows, so that the rules give it one token in the next batch. A pass schedules the group
    (the members filling their last block take a new one) and then reads the batch in flight,
    which sampled a token for every member: the group steps once (running_decodes.py).

    A member leaves the group when its last token is in flight (the rules skip it in the next
    batch; that token, read alone, finishes it), when it is preempted (its token in flight is
    read alone, stale), and when a step takes the rules (the budget cannot give every member
    its token: all leave, their tokens in flight read alone). A running decode right behind
    the group in RUNNING joins it when the next batch is scheduled; its token in flight is then
    read with the group's. Members' own counters catch up when they leave.
    """

    def __init__(self, kv_cache, **rules):
        super().__init__(kv_cache, **rules)
        self._init_group(kv_cache, tokens_in_flight=1)
        # per batch in flight, beside its sampling list: (admission order, member) of those that
        # left the group since it was scheduled, whose token from it is read alone, first
        self._read_alone: deque[list[tuple[int, Request]]] = deque()
        self._leaving: list[Request] = []  # left at the latest read: their last token in flight

    # -- the rules' hooks, with the group kept up to date ----------------------------------------

    def schedule(self, now_s: float) -> SchedulerOutput:
        output = super().schedule(now_s)
        self._read_alone.append([])
        return output

    def _schedule_running(self, output: SchedulerOutput, token_budget: int,
                          first: int = 0) -> tuple[int, bool]:
        self._join_decodes(token_budget)
        if self.decodes and len(self.decodes) <= token_budget:
            token_budget = self._schedule_decodes_in_bulk(output, token_budget)
            first = self._group_span()
        else:
            self._leave_all()  # every request by the rules, this step
        return super()._schedule_running(output, token_budget, first)

    def _preempt(self, request: Request) -> None:
        if request in self.decodes:
            self.decodes.remove(request)  # synced, before its blocks go
            self._read_alone_later(self._read_alone[-1], [request])
        del self._admission_order[request]
        super()._preempt(request)

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        """The oldest batch in flight's output: every member's token (the group steps), then
        the tokens of those read alone: members that left since it was scheduled, in running
        order, and the requests it scheduled one by one."""
        result = StepResult()
        sampling, read_alone = self._sampling.popleft(), self._read_alone.popleft()
        self._leaving = []
        if self.decodes:
            itl_s, num_sampled = self._step_group(now_s)
            result.num_bulk_sampled = num_sampled
            result.itls.append((itl_s, num_sampled))
        for _, request in sorted(read_alone, key=lambda entry: entry[0]):
            self._read_output(ScheduledRequest(request, 1, 0), result, now_s)
        for scheduled in sampling:
            self._read_output(scheduled, result, now_s)
        return result

    def _step_group(self, now_s: float) -> tuple[float, int]:
        """Every member's token in flight arrived at `now_s`: the group steps. Those whose last
        token is in flight now leave it, to be read alone. Returns the gap and the members."""
        itl_s, num_sampled, leaving = self.decodes.advance(now_s)
        self._leaving = leaving
        self._read_alone_later(self._read_alone[-1], self._leaving)
        return itl_s, num_sampled

    # -- joining and leaving the group ---------------------------------------------------------

    def _join_decodes(self, token_budget: int) -> None:
        """The running decodes right behind the group (and its members leaving now) join it, in
        running order, while the budget holds them: each with its one token in flight, sampled
        by the batch in flight, every other token computed, at least one token out (its gap is
        the group's) and more than the one in flight to come. Their tokens in flight are read
        with the group's."""
        if not self._sampling:
            return  # nothing in flight
        decodes, running, in_flight = self.decodes, self.running, self._sampling[-1]
        index = self._group_span()
        while index < len(running) and len(decodes) < token_budget:
            request = running[index]
            if not self._may_join(request):
                return
            for position, scheduled in enumerate(in_flight):
                if scheduled.request is request:
                    del in_flight[position]
                    break
            decodes.join(request)
            index += 1

    def _group_span(self) -> int:
        """How many of RUNNING's first requests the group spans: its members, and those that
        left it at the latest read and still run (the rules skip them; the next read ends
        them)."""
        return len(self.decodes) + sum(1 for request in self._leaving
                                       if request.status is RequestStatus.RUNNING)

    def _may_join(self, request: Request) -> bool:
        if (request.num_output_placeholders != 1 or request.num_draft_tokens
                or request.num_computed_tokens != request.num_tokens
                or not request.num_output_tokens or request.has_known_outputs):
            return False
        if self.decodes and request.last_token_s != self.decodes.last_sample_s:
            return False
        return min(request.max_tokens - request.num_output_tokens,
                   self.max_model_len - request.num_tokens) > 1

    def _leave_all(self) -> None:
        members = self.decodes.members()
        self.decodes.release_all()
        if members:
            self._read_alone_later(self._read_alone[-1], members)

    def _read_alone_later(self, read_alone: list, requests: list[Request]) -> None:
        """Members that left the group (synced): their token in flight is read alone. Their
        hashed tokens are brought up to date too, as each token's arrival would have."""
        for request in requests:
            read_alone.append((self._admission_order[request], request))
            self.kv_cache.cache_known_tokens(
                request, request.num_computed_tokens - request.num_output_placeholders)

    # -- identical steps in a row ----------------------------------------------------------------

    def identical_decode_steps(self) -> Optional[DecodeRun]:
        """The coming steps, while they are sure to be the same batch: every running request a
        member of the group and nobody else's token in flight, nobody admissible
        (`decodes_alone`), and the pool holding the crossing members' new blocks; up to the step
        that puts somebody's last token in flight (`_decode_run_slots`). None when the next step
        is not such a step."""
        decodes, num_decodes = self.decodes, len(self.decodes)
        if not (num_decodes and len(self.running) == num_decodes and len(self._sampling) == 1
                and not self._sampling[0] and not self._read_alone[0]):
            return None
        alone, limit = decodes_alone(self, num_decodes)
        if not alone:
            return None
        return DecodeRun(self._decode_run_slots(), num_decodes, num_decodes,
                         decodes.num_context_tokens, 0, decodes.last_sample_s,
                         admission_limit=limit, arrivals_wait=bool(self.waiting))


class BulkStaticBatchScheduler(StaticBatchScheduler):
    """STATIC's batch (static_batching.py), its decode steps counted instead of named."""

    def _add_members(self, output: SchedulerOutput) -> None:
        output.add_decodes(len(self.batch), len(self.batch) * self.num_padded_tokens)

    def _decode_step(self, result: StepResult, now_s: float) -> None:
        itl_s, num_sampled, last_tokens = self.unfinished.advance(now_s)
        result.itls.append((itl_s, num_sampled))
        result.num_bulk_sampled = num_sampled
        self._finish(last_tokens, result)

    def identical_decode_steps(self, wider: bool = True) -> Optional[DecodeRun]:
        """While no member finishes, every decode step of the batch is the same (`wider`: as
        BulkScheduler's, but STATIC's runs have no wider kind)."""
        num_steps = self.unfinished.steps_before_a_finish()
        if not (self.prefilled and num_steps > 0):
            return None
        return DecodeRun(itertools.repeat(0, num_steps), len(self.batch), len(self.unfinished),
                         len(self.batch) * self.num_padded_tokens,
                         len(self.batch) - len(self.unfinished), self.unfinished.last_sample_s,
                         self._num_idle_slots())

    def apply_decode_run(self, run: DecodeRun, step_ends_s: list[float]) -> list[Request]:
        """The engine ran len(step_ends_s) decode steps of the batch, ending at those times (a
        run of them finishes nobody)."""
        for end_s in step_ends_s:
            self.kv_cache.fill(run.num_sampled)
            self.unfinished.advance(end_s)
            self.num_padded_tokens += 1
        return []
