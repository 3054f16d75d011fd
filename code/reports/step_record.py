"""Every step of a run, request by request, with the reason for each decision (`--html`,
`--explain`).

`StepRecorder` stands before a continuous-batching mode (as the invariant checker does): it
gives the engine loop an `ExplainedScheduler` (explain.py), the plain rules that note what they
looked at, and after every step it keeps a `StepRecord`: who arrived, who was scheduled for how
many tokens, who was admitted, preempted or finished, the free blocks, the blocks each request
took and gave back, the step's virtual time and what it cost, the latencies so far, and a
sentence for every decision. Only the steps of `--html-steps A:B` are kept; the state when the
window opens (`WindowStart`) lets the page start there.

The records are compact: a running decode, one token as expected, is kept as its id alone
(`plain_decodes`), since the page can work out both its new state and its sentence. The
requests waiting behind WAITING's head are not kept at all: each waits behind the head
(explain.py's `wait_behind`), and the page knows the queue.
"""

from dataclasses import dataclass, field
from typing import Optional

from batch import EngineStep
from config import ConfigError
from forward_model import RooflineClock, SpeculativeClock
from reports.explain import ExplainedScheduler
from reports.reasons import Reason


@dataclass
class RequestState:
    """A request's tokens after a step: computed so far / its sequence (prompt + outputs)."""
    request_id: str
    num_computed_tokens: int
    num_tokens: int


@dataclass
class StepRecord:
    index: int
    start_s: float
    step_s: float
    cost_s: Optional[tuple]          # (weights, KV reads, compute, the rest), s; None: no split
    arrived: list[str]               # joined WAITING before the step's schedule
    scheduled: list[tuple]           # (request id, new tokens, drafts), in scheduling order
    admitted: list[str]
    preempted: list[str]
    finished: list[str]
    num_free_blocks: int
    num_running: int                 # after the step
    num_waiting: int
    decisions: list[Reason]          # running loop, then the head of WAITING
    events: list[Reason]             # arrivals, hits, first tokens, drafts verified, finishes
    changed: list[RequestState]      # after the step: every scheduled or preempted request ...
    plain_decodes: set[str]          # ... but these, which decoded one token as expected
    new_blocks: list[tuple]          # (request id, block ids it took), in scheduling order
    cached_free: list[int]           # blocks freed in the step that keep a cache entry
    mean_ttft_s: Optional[float]     # over the first tokens so far
    mean_itl_s: Optional[float]      # over the inter-token gaps so far
    num_completed: int
    running_before: list[str] = field(default_factory=list)  # RUNNING as the step found it,
    waiting_after: list[str] = field(default_factory=list)   # WAITING after it (both kept only
    #                                                          for the terminal's --explain)


@dataclass
class WindowStart:
    """The state when the recorded window opens (after the step before it)."""
    running: list[RequestState]
    waiting: list[RequestState]
    tables: dict[str, list[int]]
    cached_free: list[int]


@dataclass(frozen=True)
class RequestInfo:
    request_id: str
    prompt_len: int
    max_tokens: int
    arrival_s: float


class PageTooLarge(ConfigError):
    """The window's steps would not fit the page: one line, exit status 2."""


class StepRecorder:
    """A mode, as the engine loop sees it, and the observer of its every step."""
    needs_every_request = True

    def __init__(self, mode, clock, first_step: int = 0, stop_step: Optional[int] = None,
                 size_limit=None, keep_queues: bool = False):
        """`size_limit`, if given, is called with each record and raises PageTooLarge once the
        records would no longer fit a page; `keep_queues` keeps WAITING after every step."""
        self.mode = mode
        self.name = mode.name
        self.clock = clock
        self.first_step = first_step
        self.stop_step = stop_step
        self.size_limit = size_limit
        self.keep_queues = keep_queues
        self.scheduler: Optional[ExplainedScheduler] = None
        self.num_blocks = 0  # the pool's, once the scheduler is made
        self.records: list[StepRecord] = []
        self.start: Optional[WindowStart] = None
        self.requests: dict[str, RequestInfo] = {}
        self.num_steps = 0
        self._tables: dict[str, list[int]] = {}  # block tables after the last step (copies)
        self._holders: dict[int, int] = {}       # held block -> how many tables hold it
        self._ttft_sum_s, self._num_ttfts = 0.0, 0
        self._itl_sum_s, self._num_itls = 0.0, 0
        self._num_completed = 0

    # -- the mode's side ----------------------------------------------------------------------

    def make_scheduler(self, config, num_gpu_blocks: int, acceptance_rng):
        self.scheduler = self.mode.make_scheduler(config, num_gpu_blocks, acceptance_rng,
                                                  scheduler_class=ExplainedScheduler)
        self.num_blocks = num_gpu_blocks
        if self.first_step == 0:
            self.start = WindowStart([], [], {}, [])
        return self.scheduler

    def caches_prefixes(self, config) -> bool:
        return self.mode.caches_prefixes(config)

    # -- the observer's side ------------------------------------------------------------------

    def __call__(self, step: EngineStep) -> None:
        scheduler = self.scheduler
        arrivals, scheduler.arrivals = scheduler.arrivals, []
        self._count_latencies(step)
        in_window = self.first_step <= step.index and (self.stop_step is None
                                                        or step.index < self.stop_step)
        new_blocks, cached_free = self._follow_tables(step)
        self.num_steps = step.index + 1
        if in_window:
            record = self._record(step, arrivals, new_blocks, cached_free)
            self.records.append(record)
            if self.size_limit:
                self.size_limit(self, record)
        if step.index + 1 == self.first_step:
            self.start = self._window_start()

    def _record(self, step: EngineStep, arrivals, new_blocks, cached_free) -> StepRecord:
        scheduler, batch, result = self.scheduler, step.batch, step.result
        notes = scheduler.notes
        running_before = {state.request.request_id: state for state in notes.running}
        decisions = notes.reasons
        for request in arrivals:
            self._know(request)
        for item in batch.scheduled:
            self._know(item.request)
        events = [self._arrival_event(request) for request in arrivals]
        events += [reason for reason in decisions if reason.rule in ("hit", "miss")]
        decisions = [reason for reason in decisions if reason.rule not in ("hit", "miss")]
        events += self._result_events(result)
        changed, plain = [], set()
        for item in batch.scheduled:
            request, before = item.request, running_before.get(item.request.request_id)
            if (before is not None and item.num_new_tokens == 1 and not item.num_draft_tokens
                    and before.num_tokens - before.num_computed_tokens == 1
                    and request.num_computed_tokens == before.num_computed_tokens + 1
                    and request.num_tokens == before.num_tokens + 1):
                plain.add(request.request_id)
            else:
                changed.append(RequestState(request.request_id, request.num_computed_tokens,
                                            request.num_tokens))
        for request in batch.preempted:
            changed.append(RequestState(request.request_id, 0, request.num_tokens))
        running_ids = set(running_before)
        return StepRecord(
            step.index, step.start_s, step.step_s, cost_parts_s(self.clock, batch, step.step_s),
            [request.request_id for request in arrivals if not request.reject_reason],
            [(item.request.request_id, item.num_new_tokens, item.num_draft_tokens)
             for item in batch.scheduled],
            [item.request.request_id for item in batch.scheduled
             if item.request.request_id not in running_ids],
            [request.request_id for request in batch.preempted],
            [request.request_id for request in result.finished],
            step.num_free_blocks, step.num_running, step.num_waiting, decisions, events,
            changed, plain, new_blocks, cached_free,
            self._ttft_sum_s / self._num_ttfts if self._num_ttfts else None,
            self._itl_sum_s / self._num_itls if self._num_itls else None,
            self._num_completed,
            [state.request.request_id for state in notes.running] if self.keep_queues else [],
            [request.request_id for request in scheduler.waiting] if self.keep_queues else [])

    def _know(self, request) -> None:
        if request.request_id not in self.requests:
            self.requests[request.request_id] = RequestInfo(
                request.request_id, request.prompt_len, request.max_tokens, request.arrival_s)

    def _arrival_event(self, request) -> Reason:
        if request.reject_reason:
            return Reason(request.request_id, "rejected", {"reason": request.reject_reason})
        return Reason(request.request_id, "arrived",
                      {"time_ms": f"{request.arrival_s * 1000:.1f}"})

    def _result_events(self, result) -> list[Reason]:
        events = []
        for request, num_drafts, num_accepted in result.verified:
            events.append(Reason(request.request_id, "verified", {
                "drafts": num_drafts, "accepted": num_accepted,
                "rejected": num_drafts - num_accepted}))
        for request in result.first_tokens:
            ttft_ms = (request.first_token_s - request.arrival_s) * 1000
            events.append(Reason(request.request_id, "first_token", {"ttft_ms": f"{ttft_ms:.1f}"}))
        max_model_len = self.scheduler.max_model_len
        for request in result.finished:
            blocks = len(self._freed_tables.get(request.request_id, ()))
            if request.num_output_tokens >= request.max_tokens:
                events.append(Reason(request.request_id, "finished", {
                    "outputs": request.num_output_tokens, "max_tokens": request.max_tokens,
                    "blocks": blocks}))
            else:
                events.append(Reason(request.request_id, "finished_cut", {
                    "total": request.num_tokens, "max_model_len": max_model_len,
                    "blocks": blocks}))
        return events

    def _count_latencies(self, step: EngineStep) -> None:
        for request in step.result.first_tokens:
            self._ttft_sum_s += request.first_token_s - request.arrival_s
            self._num_ttfts += 1
        for itl_s, count in step.result.itls:
            self._itl_sum_s += itl_s * count
            self._num_itls += count
        self._num_completed += len(step.result.finished)

    def _follow_tables(self, step: EngineStep) -> tuple[list, list]:
        """The blocks each request took in the step, and those freed that stay cached: the
        block tables now, and those given back (finished or preempted requests'), against the
        tables after the last step (a table only grows while its request runs)."""
        tables, mine, holders = step.block_tables, self._tables, self._holders
        self._freed_tables = freed = self.scheduler.take_freed_tables()
        new_blocks = []
        for item in step.batch.scheduled:
            request_id = item.request.request_id
            table = tables.get(request_id, freed.get(request_id, []))
            held = mine.setdefault(request_id, [])
            if len(table) > len(held):
                taken = table[len(held):]
                held.extend(taken)
                for block in taken:
                    holders[block] = holders.get(block, 0) + 1
                new_blocks.append((request_id, taken))
        let_go = []
        for request_id, table in freed.items():
            mine.pop(request_id, None)
            for block in table:
                holders[block] -= 1
                if holders[block] == 0:
                    del holders[block]
                    let_go.append(block)
        pool = self.scheduler.kv_cache.pool
        cached_free = sorted({block for block in let_go
                              if block not in holders and pool.cache_entry(block) is not None})
        return new_blocks, cached_free

    def _window_start(self) -> WindowStart:
        scheduler = self.scheduler
        for request in [*scheduler.running, *scheduler.waiting]:
            self._know(request)
        pool = scheduler.kv_cache.pool
        return WindowStart(
            [RequestState(r.request_id, r.num_computed_tokens, r.num_tokens)
             for r in scheduler.running],
            [RequestState(r.request_id, r.num_computed_tokens, r.num_tokens)
             for r in scheduler.waiting],
            {request_id: list(table) for request_id, table in self._tables.items()},
            [block for block in pool.free_block_ids() if pool.cache_entry(block) is not None])


def cost_parts_s(clock, batch, step_s: float) -> Optional[tuple]:
    """What the step's time is made of on the roofline clock (forward_model.py): streaming the
    weights, reading the KV cache, the arithmetic, and the rest (fixed costs per step and layer,
    all-reduces, a proposer's drafting). Memory and arithmetic overlap (roofline), so the four
    add up to more than the step. None on the linear clock, which has no such parts."""
    drafting_s = 0.0
    if isinstance(clock, SpeculativeClock):
        drafting_s = step_s - clock.target.step_time_s(batch)
        clock = clock.target
    if not isinstance(clock, RooflineClock):
        return None
    num_tokens = batch.num_scheduled_tokens
    compute_s = (num_tokens * clock.gemm_s_per_token + batch.num_seqs * clock.lm_head_s_per_seq
                 + batch.num_attention_pairs * clock.attention_s_per_pair)
    kv_s = (batch.num_context_tokens + num_tokens) * clock.kv_s_per_token
    rest_s = clock.fixed_s + num_tokens * clock.all_reduce_s_per_token + drafting_s
    return clock.weight_stream_s, kv_s, compute_s, rest_s
