"""Why each request did what it did in a step: one sentence naming the rule and its numbers.

    step 2, request 1:   chunk of 511 of the 866 tokens it has left: what the budget keeps
                         after the 1 requests before it took 1
    step 301, request 9: not admitted: its chunk fits, but with the proposer's 3 lookahead
                         slots it needs 11 blocks, 10 are free

`ExplainedScheduler` is vLLM V1's scheduler (scheduler.py) and nothing else: it runs the plain
rules, one request at a time (never the bulk path, which skips the running decodes), and before
and after each `schedule` it notes what the rules looked at: the running requests' tokens and
blocks, the free blocks, and, when the head of WAITING had to wait, what it found cached and
how many blocks it needed. From those notes and the `SchedulerOutput`, `explain_schedule` walks
the rules again, request by request, as `Scheduler.schedule` does (the running loop, then the
waiting loop), and says what each rule decided with the numbers it decided by. It checks itself
against the scheduler as it goes: the tokens it expects each request to get, who it expects to
be preempted, and what kept WAITING's head out must be what the scheduler did, or it raises
`ExplanationMismatch` (a bug in this file, never the user's).

The rules' sentences, each linked to the vLLM 0.30.0 function that makes the same decision,
are in reasons.py.
"""

from dataclasses import dataclass, field
from typing import Optional

from batch import AdmissionLimit, PrefixLookup, ScheduledRequest, SchedulerOutput
from kv_cache import num_blocks_for
from reports.reasons import Reason
from request import Request
from scheduler import Scheduler

class ExplanationMismatch(AssertionError):
    """The rules walked again disagree with what the scheduler did: a bug in explain.py."""


# -- what the rules looked at --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RunningBefore:
    """A running request as the step found it."""
    request: Request
    num_computed_tokens: int
    num_tokens: int
    num_draft_tokens: int
    num_held_blocks: int

    @property
    def num_tokens_to_compute(self) -> int:
        return self.num_tokens + self.num_draft_tokens - self.num_computed_tokens


@dataclass
class ScheduleNotes:
    """What `schedule` looked at and decided, for `explain_schedule`."""
    running: list[RunningBefore]
    num_free_blocks: int
    tables: dict[str, list[int]]   # the block tables before the step (the lists themselves)
    output: Optional[SchedulerOutput] = None
    head: Optional[Request] = None  # WAITING's head after the step, if it had to wait
    head_hit: int = 0               # ... the cached blocks it found
    head_needed: int = 0            # ... the blocks it needed beyond those
    head_free_hits: int = 0         # ... of the cached ones, those nobody held (they count)
    head_free: int = 0              # ... the free blocks then
    reasons: list = field(default_factory=list)  # explain_schedule's, made right then


class ExplainedScheduler(Scheduler):
    """vLLM V1's scheduler, on its plain rules, noting what each `schedule` looked at."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bulk_decodes = False  # every request one at a time: each gets its sentence
        self.arrivals: list[Request] = []  # since the last step, in order (rejected ones too)
        self.notes: Optional[ScheduleNotes] = None
        self._freed_tables: dict[str, list[int]] = {}  # given back since last asked

    def take_freed_tables(self) -> dict[str, list[int]]:
        """The block tables of the requests that finished or were preempted since the last
        call, as they were when given back."""
        freed, self._freed_tables = self._freed_tables, {}
        return freed

    def _preempt(self, request: Request) -> None:
        self._freed_tables[request.request_id] = self.kv_cache.block_tables.get(
            request.request_id, [])
        super()._preempt(request)

    def _free_finished(self, request: Request) -> None:
        self._freed_tables[request.request_id] = self.kv_cache.block_tables.get(
            request.request_id, [])
        super()._free_finished(request)

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        self.arrivals.append(request)

    def schedule(self, now_s: float) -> SchedulerOutput:
        tables = self.kv_cache.block_tables
        notes = ScheduleNotes(
            [RunningBefore(r, r.num_computed_tokens, r.num_tokens, r.num_draft_tokens,
                           len(tables.get(r.request_id, ()))) for r in self.running],
            self.kv_cache.num_free_blocks, dict(tables))
        output = super().schedule(now_s)
        notes.output = output
        if self._looked_at_head(output):
            self._note_head(notes)
        notes.reasons = explain_schedule(self, notes)  # now, before the step changes anything
        self.notes = notes
        return output

    def _looked_at_head(self, output: SchedulerOutput) -> bool:
        """Did `_schedule_waiting` look the head up and find it could not come in (the batch
        was not full, nobody was preempted)?"""
        if not self.waiting or output.preempted:
            return False
        slots = self.speculation.num_draft_slots
        budget = self.max_num_batched_tokens - output.num_scheduled_tokens - slots * output.num_seqs
        return budget - slots > 0 and len(self.running) < self.max_num_seqs

    def _note_head(self, notes: ScheduleNotes) -> None:
        """The head's blocks as `_head_limit` counted them: nothing moved since."""
        head, kv_cache = self.waiting[0], self.kv_cache
        cached_blocks = kv_cache.find_cached_prefix(head)
        free_hits = sum(1 for block_id in cached_blocks if kv_cache.pool.is_free(block_id))
        needed = (kv_cache.num_new_blocks_needed(head.request_id, head.num_tokens)
                  - len(cached_blocks) + free_hits)
        notes.head, notes.head_hit, notes.head_free_hits = head, len(cached_blocks), free_hits
        notes.head_needed, notes.head_free = needed, kv_cache.num_free_blocks


# -- the rules, walked again ---------------------------------------------------------------------

def explain_schedule(scheduler: ExplainedScheduler, notes: ScheduleNotes) -> list[Reason]:
    """A decision for every request the step's `schedule` looked at: the running ones in
    order, then WAITING's head (and the hits of those admitted). The requests waiting behind
    the head are left out: each waits behind it (`wait_behind`)."""
    walk = _Walk(scheduler, notes)
    walk.running_loop()
    walk.waiting_loop()
    return walk.reasons


class _Walk:
    def __init__(self, scheduler: ExplainedScheduler, notes: ScheduleNotes):
        self.s = scheduler
        self.notes = notes
        self.output = notes.output
        self.budget = scheduler.max_num_batched_tokens
        self.used = 0
        self.num_ahead = 0
        self.free = notes.num_free_blocks
        self.reasons: list[Reason] = []
        self.scheduled = {item.request.request_id: item for item in self.output.scheduled}
        self.preempted: list[Request] = []

    def say(self, subject: Request, rule: str, **numbers) -> None:
        self.reasons.append(Reason(subject.request_id, rule, numbers))

    # -- RUNNING -----------------------------------------------------------------------------

    def running_loop(self) -> None:
        s, slots = self.s, self.s.speculation.num_draft_slots
        running = list(self.notes.running)
        index = 0
        while index < len(running):
            state = running[index]
            if self.budget <= slots:
                for rest in running[index:]:
                    self.say(rest.request, "budget_spent", used=self.used,
                             budget=s.max_num_batched_tokens)
                return
            num_new_tokens, cap = self._num_new_tokens(state, self.budget - slots)
            if num_new_tokens == 0:
                self.say(state.request, "nothing_to_compute")
                index += 1
                continue
            lookahead = s._num_lookahead_tokens(state.num_computed_tokens + num_new_tokens)
            needed = max(0, num_blocks_for(state.num_computed_tokens + num_new_tokens + lookahead,
                                           s.kv_cache.block_size) - state.num_held_blocks)
            while needed > self.free:
                victim = running.pop()
                self._preempt(victim, state, needed, running)
                if victim is state:
                    for rest in running[index:]:
                        self.say(rest.request, "after_self_preemption",
                                 request=state.request.request_id)
                    self._check_preempted()
                    return
            self.free -= needed
            self._check_tokens(state.request, num_new_tokens)
            self._say_running(state, num_new_tokens, cap)
            self.budget -= num_new_tokens + slots
            self.used += num_new_tokens
            self.num_ahead += 1
            index += 1
        self._check_preempted()

    def _num_new_tokens(self, state: RunningBefore, budget: int) -> tuple[int, str]:
        """What `Scheduler._num_new_tokens` gives, and which of its limits bound it."""
        s = self.s
        candidates = [(state.num_tokens_to_compute, "rest"),
                      (budget, "budget"),
                      (s.max_model_len - 1 - state.num_computed_tokens, "max_model_len")]
        threshold = s.long_prefill_token_threshold
        if 0 < threshold < state.num_tokens_to_compute:
            candidates.insert(1, (threshold, "threshold"))
        return min(candidates, key=lambda candidate: candidate[0])

    def _say_running(self, state: RunningBefore, num_new_tokens: int, cap: str) -> None:
        request, budget = state.request, self.budget
        is_decode = state.num_tokens - state.num_computed_tokens == 1
        if is_decode:
            drafts = self.scheduled[request.request_id].num_draft_tokens
            if drafts < state.num_draft_tokens:
                self.say(request, "decode_drafts_cut", drafts=drafts,
                         proposed=state.num_draft_tokens, tokens=num_new_tokens, budget=budget)
            elif drafts:
                self.say(request, "decode_drafts", drafts=drafts, tokens=num_new_tokens,
                         budget=budget)
            else:
                self.say(request, "decode", budget=budget)
        elif cap == "rest":
            self.say(request, "rest", tokens=num_new_tokens, computed=state.num_computed_tokens,
                     total=state.num_tokens, budget=budget)
        elif cap == "threshold":
            self.say(request, "chunk_threshold", tokens=num_new_tokens,
                     remaining=state.num_tokens_to_compute)
        elif cap == "budget":
            self.say(request, "chunk_budget", tokens=num_new_tokens,
                     remaining=state.num_tokens_to_compute, used=self.used, ahead=self.num_ahead)
        else:
            self.say(request, "chunk_max_model_len", tokens=num_new_tokens,
                     last=self.s.max_model_len - 1, max_model_len=self.s.max_model_len)

    def _preempt(self, victim: RunningBefore, state: RunningBefore, needed: int,
                 still_running: list[RunningBefore]) -> None:
        """The victim's blocks that nobody still running holds go back to the pool. (A table
        only grows in a step, so its first `num_held_blocks` are what it held before.)"""
        tables = self.notes.tables
        table = tables.get(victim.request.request_id, [])[:victim.num_held_blocks]
        others = set()
        if self.s.kv_cache.enable_prefix_caching:  # only then may two tables share a block
            for other in still_running:
                others.update(tables.get(other.request.request_id, [])[:other.num_held_blocks])
        freed = sum(1 for block in table if block not in others)
        if victim is state:
            self.say(victim.request, "preempted_self", needed=needed, free=self.free)
        else:
            self.say(victim.request, "preempted", freed=freed,
                     request=state.request.request_id, needed=needed, free=self.free)
        self.free += freed
        self.preempted.append(victim.request)

    # -- WAITING -----------------------------------------------------------------------------

    def waiting_loop(self) -> None:
        s, output, slots = self.s, self.output, self.s.speculation.num_draft_slots
        running_ids = {state.request.request_id for state in self.notes.running}
        admitted = [item for item in output.scheduled if item.request.request_id not in running_ids]
        lookups = {lookup.request_id: lookup for lookup in output.prefix_lookups}
        held = set()
        if any(lookup.num_cached_tokens for lookup in output.prefix_lookups):
            held = {block for request_id in running_ids
                    for block in s.kv_cache.block_tables.get(request_id, ())}
        for item in admitted:
            self._say_admitted(item, lookups.get(item.request.request_id), held)
            self.budget -= item.num_new_tokens + slots
            self.used += item.num_new_tokens
            held.update(s.kv_cache.block_tables.get(item.request.request_id, ()))
        victims = set(self.preempted)
        heads = [request for request in s.waiting if request not in victims][:1]
        limit = self._head_reason(heads[0], self.budget - slots) if heads else None
        if self.preempted and s.waiting:
            limit = AdmissionLimit.KV_BLOCKS  # only preempted requests wait: the pool ran out
        if limit is not output.admission_limit:
            raise ExplanationMismatch(f"request {head.request_id} waits for {limit}, the "
                                      f"scheduler says {output.admission_limit}")

    def _say_admitted(self, item: ScheduledRequest, lookup: Optional[PrefixLookup],
                      held: set[int]) -> None:
        s, request, block_size = self.s, item.request, self.s.kv_cache.block_size
        num_cached_tokens = lookup.num_cached_tokens if lookup else 0
        hit = num_cached_tokens // block_size
        table = s.kv_cache.block_tables.get(request.request_id, [])
        num_free_hits = sum(1 for block in table[:hit] if block not in held)
        free = self.free
        blocks = len(table) - hit  # new ones, the lookahead's included
        self.free -= blocks + num_free_hits
        remaining = request.num_tokens - num_cached_tokens  # as admitted (outputs so far kept)
        num_new_tokens = item.num_new_tokens
        threshold = s.long_prefill_token_threshold
        if num_new_tokens == remaining:
            self.say(request, "admitted", total=request.num_tokens, blocks=blocks, free=free,
                     tokens=num_new_tokens, budget=self.budget)
        elif 0 < threshold == num_new_tokens:
            self.say(request, "admitted_threshold", tokens=num_new_tokens, remaining=remaining,
                     blocks=blocks, free=free)
        else:
            self.say(request, "admitted_chunk", tokens=num_new_tokens, remaining=remaining,
                     used=self.used, blocks=blocks, free=free)
        if lookup is not None:
            if hit:
                self.say(request, "hit", hit=hit, tokens=num_cached_tokens)
            else:
                self.say(request, "miss", total=lookup.num_tokens)

    def _head_reason(self, head: Request, budget: int) -> AdmissionLimit:
        """Why the head of WAITING waits, as `_schedule_waiting` decided it."""
        s, notes = self.s, self.notes
        if self.preempted:
            self.say(head, "wait_preemption", request=self.preempted[0].request_id)
            return AdmissionLimit.KV_BLOCKS
        if budget <= 0:
            self.say(head, "wait_budget", used=self.used, budget=s.max_num_batched_tokens)
            return AdmissionLimit.TOKEN_BUDGET
        if len(s.running) >= s.max_num_seqs:
            self.say(head, "wait_max_num_seqs", running=len(s.running),
                     max_num_seqs=s.max_num_seqs)
            return AdmissionLimit.MAX_NUM_SEQS
        if notes.head is head:  # the pool said no (the scheduler noted its numbers)
            num_new_tokens = head.num_tokens - notes.head_hit * s.kv_cache.block_size
            if (not s.enable_chunked_prefill
                    and s._cap_long_prefill(num_new_tokens) > budget):
                self.say(head, "wait_whole_prompt", tokens=num_new_tokens, budget=budget)
                return AdmissionLimit.TOKEN_BUDGET
            if notes.head_needed > notes.head_free:
                if notes.head_hit:
                    self.say(head, "wait_blocks_cached", hit=notes.head_hit,
                             total=head.num_tokens, needed=notes.head_needed,
                             free_hits=notes.head_free_hits, free=notes.head_free)
                else:
                    self.say(head, "wait_blocks", needed=notes.head_needed,
                             total=head.num_tokens, free=notes.head_free)
                return AdmissionLimit.KV_BLOCKS
            self._say_lookahead(head, budget)
            return AdmissionLimit.KV_BLOCKS
        raise ExplanationMismatch(f"request {head.request_id} heads WAITING with budget and "
                                  "seats left, yet the scheduler did not look it up")

    def _say_lookahead(self, head: Request, budget: int) -> None:
        s, notes = self.s, self.notes
        cached_tokens = notes.head_hit * s.kv_cache.block_size
        num_new_tokens = min(s._cap_long_prefill(head.num_tokens - cached_tokens), budget)
        lookahead = s._num_lookahead_tokens(cached_tokens + num_new_tokens)
        needed = (num_blocks_for(cached_tokens + num_new_tokens + lookahead, s.kv_cache.block_size)
                  - notes.head_hit + notes.head_free_hits)  # as can_fit counts them
        if needed <= notes.head_free:
            raise ExplanationMismatch(f"request {head.request_id} waits for blocks, yet its "
                                      f"{needed} fit the {notes.head_free} free")
        self.say(head, "wait_lookahead", lookahead=lookahead, needed=needed, free=notes.head_free)

    # -- checks against the scheduler --------------------------------------------------------

    def _check_tokens(self, request: Request, num_new_tokens: int) -> None:
        item = self.scheduled.get(request.request_id)
        got = item.num_new_tokens if item else 0
        if got != num_new_tokens:
            raise ExplanationMismatch(f"request {request.request_id}: the rules give "
                                      f"{num_new_tokens} tokens, the scheduler gave {got}")

    def _check_preempted(self) -> None:
        expected = [r.request_id for r in self.preempted]
        got = [r.request_id for r in self.output.preempted]
        if expected != got:
            raise ExplanationMismatch(f"the rules preempt {expected}, the scheduler {got}")
