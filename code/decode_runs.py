"""The speed room's fast-forward: runs of identical steps, priced and recorded without asking
the scheduler again.

After a step, a bulk scheduler (bulk_scheduler.py) may be sure that its coming steps are the
same batch, step after step (`identical_decode_steps`, a `DecodeRun`): decodes alone with nobody
admissible, or decodes and one prompt's chunks, up to a step that would change something. This
module's loops then take those steps one by one as main.simulate's loop would, each priced on
the clock and recorded on its own, and hand the scheduler their end times at once
(`apply_decode_run`). An arrival that can only wait (it finds the budget spent, or queues behind
a head kept out) does not end a run: it is admitted between two of its steps, as the pass after
the first would admit it, and the run goes on:

    RunsOfIdenticalSteps            the grouped schedulers' part: what each coming step of a
                                    run reserves, and the run applied at once
    decodes_alone, waiting_limit    can the coming steps be decodes alone, WAITING's head out
    repeat_identical_steps          main.simulate's call after every pass: one of the two below
    repeat_identical_decode_steps   synchronous scheduling (and a cluster's replicas)
    repeat_identical_queued_steps   async scheduling: each step timed as the engine's batch
                                    queue times it (a batch starts when the one before ends,
                                    whose output is read then)

Nothing here is a rule of vLLM's scheduler, and nothing here changes a result: the steps are
the ones the rules would take, with the same sums (tests/test_bulk_scheduler.py).
"""

from typing import Iterator, NamedTuple, Optional

from async_scheduling import BatchQueue
from batch import AdmissionLimit, DecodeRun, EngineStep, SchedulerOutput, StepResult
from kv_cache import num_blocks_for
from request import Request
from scheduler import Scheduler


class RunsOfIdenticalSteps:
    """What a grouped scheduler (bulk_scheduler.GroupedDecodes) does for a run it offers: what
    each coming step of it reserves, until one would change something, and the run applied
    once the engine ran it. The scheduler brings its group (`self.decodes`), its KV cache and
    its rules' caps; `_step_group` is its own group's step."""

    def _decode_run_slots(self, prompt: Optional[Request] = None, num_prompt_tokens: int = 0,
                          through_a_finish: bool = False) -> Iterator[int]:
        """Slots each coming step of a run reserves, until one would finish somebody or the
        pool could not hold its crossing decodes' blocks. With tokens in flight, a step putting
        somebody's last token in flight is still one of the run (reading the batch before it
        finishes nobody); the one after it, which skips that member, is not.
        `through_a_finish`: the step that samples somebody's last token is the run's last
        (it is scheduled as the others are; its finished requests are freed after it).

        With a `prompt` behind the decodes, each step also gives it a chunk of
        `num_prompt_tokens`, up to the step whose chunk would not spend them all (or would end
        its prompt), and its new blocks are taken after the decodes' (in running order)."""
        decodes, kv_cache = self.decodes, self.kv_cache
        num_free_blocks = kv_cache.num_free_blocks
        step = decodes.step
        if prompt is not None:
            num_computed, chunk_blocks = prompt.num_computed_tokens, self._chunk_blocks(prompt,
                                                                                num_prompt_tokens)
        while True:
            finishes = decodes.finishes_at(step + 1 - decodes.tokens_in_flight)
            if finishes and not through_a_finish:
                return
            num_new_blocks = len(decodes.crossing_at(step))
            if prompt is not None:
                if not self._chunk_spends_budget(prompt, num_computed, num_prompt_tokens):
                    return
                num_computed += num_prompt_tokens
                num_new_blocks += next(chunk_blocks)
            if num_new_blocks > num_free_blocks:
                return
            num_free_blocks -= num_new_blocks
            yield num_new_blocks * kv_cache.block_size
            if finishes:
                return
            step += 1

    def _chunk_spends_budget(self, request: Request, num_computed: int, token_budget: int) -> bool:
        """Would the rules give a running prompt with `num_computed` tokens computed a chunk of
        the whole `token_budget` (`_num_new_tokens`), leaving it a prompt still (no sample)?"""
        num_left = request.num_tokens - num_computed
        return (num_left > token_budget and self._cap_long_prefill(num_left) >= token_budget
                and self.max_model_len - 1 - num_computed >= token_budget)

    def _chunk_blocks(self, prompt: Request, num_prompt_tokens: int) -> Iterator[int]:
        """The new blocks each of the prompt's coming chunks of `num_prompt_tokens` takes."""
        kv_cache = self.kv_cache
        num_computed = prompt.num_computed_tokens
        num_held = len(kv_cache.block_tables[prompt.request_id])
        while True:
            num_computed += num_prompt_tokens
            num_new_blocks = num_blocks_for(num_computed, kv_cache.block_size) - num_held
            num_held += num_new_blocks
            yield num_new_blocks

    def apply_decode_run(self, run: DecodeRun, step_ends_s: list[float]) -> list[Request]:
        """The engine ran len(step_ends_s) steps of `run` (under async scheduling: read their
        outputs at those times): what schedule and update would have done in each of them, in
        order; returns the requests its last step finished (freed now). The blocks of all the
        steps are taken at once, in the order the rules take them (each step's crossing
        decodes, then the prompt's chunk): nothing is freed in between, so the pool hands out
        the same blocks. The prompt's full blocks get their cache entries after the take (an
        entry for a held block changes no block the pool hands out; a block a take evicts is
        cached under its content again by the prompt, before or after, all the same). Decodes
        whose outputs are known in advance register blocks as the steps go: one step at a
        time."""
        kv_cache, decodes, prompt = self.kv_cache, self.decodes, run.prompt
        if kv_cache.enable_prefix_caching and decodes.num_with_known_outputs:
            return self._apply_decode_run_steps(run, step_ends_s)
        steps = range(decodes.step, decodes.step + len(step_ends_s))
        if prompt is None:  # a block for each crossing decode, step after step
            kv_cache.append_blocks([request_id for step in steps
                                    for request_id in decodes.crossing_at(step)])
        else:  # ... and the prompt's chunk's blocks after them, in each step
            chunk_blocks = self._chunk_blocks(prompt, run.num_prompt_tokens)
            kv_cache.append_run_blocks([(decodes.crossing_at(step), next(chunk_blocks))
                                        for step in steps], prompt.request_id)
            kv_cache.note_scheduled(prompt, prompt.num_computed_tokens
                                    + run.num_prompt_tokens * len(step_ends_s))
        kv_cache.fill_slots((run.num_seqs + run.num_prompt_tokens) * len(step_ends_s))
        if prompt is not None:
            prompt.num_computed_tokens += run.num_prompt_tokens * len(step_ends_s)
        return self._step_group_in_run(step_ends_s)

    def _step_group_in_run(self, step_ends_s: list[float]) -> list[Request]:
        """The group steps once per step of a run, ending at these times; returns those the
        last step finished (none here: see BulkScheduler's)."""
        for end_s in step_ends_s:
            self._step_group(end_s)
        return []

    def _apply_decode_run_steps(self, run: DecodeRun, step_ends_s: list[float]) -> list[Request]:
        """apply_decode_run one step at a time, as schedule and update do it: with prefix
        caching, for decodes whose filled blocks are registered (their outputs are known; such
        a run has no prompt's chunks, see BulkScheduler.decodes_and_a_chunk)."""
        kv_cache, decodes = self.kv_cache, self.decodes
        for index, end_s in enumerate(step_ends_s, 1):
            kv_cache.append_blocks(decodes.crossing_now())
            self._register_completed_blocks(decodes.step)
            kv_cache.fill_slots(run.num_seqs)
            if index < len(step_ends_s):
                self._step_group(end_s)
        return self._step_group_in_run(step_ends_s[-1:])


def decodes_alone(scheduler: Scheduler, num_decodes: int) -> tuple[bool, Optional[AdmissionLimit]]:
    """Can the coming steps be the `num_decodes` running decodes alone (the budget covers them,
    and WAITING's head, if any, stays out), and what keeps the head out (None: nobody waits)."""
    token_budget = scheduler.max_num_batched_tokens - num_decodes
    if token_budget < 0:
        return False, None
    if not scheduler.waiting:
        return True, None
    limit = waiting_limit(scheduler, token_budget)
    return limit is not None, limit  # None: the head could be admitted


def waiting_limit(scheduler: Scheduler, token_budget: int) -> Optional[AdmissionLimit]:
    """What keeps the head of WAITING out now, through the coming decode-only steps too; None
    if it could be admitted now, or if its reason might change while decodes run.

    The budget and the batch stay as they are, and the free blocks only shrink, so the head
    stays out, for the same reason, with one exception: without chunked prefill, a head that
    waits for blocks while it finds some cached may lose those to the decodes' new blocks,
    and then wait for the budget instead. Such a step takes the rules."""
    limit = scheduler._batch_limit(token_budget)
    if limit is not None:
        return limit
    head = scheduler.waiting[0]
    cached_blocks = scheduler.kv_cache.find_cached_prefix(head)
    limit = scheduler._head_limit(head, token_budget, cached_blocks)
    if (limit is AdmissionLimit.KV_BLOCKS and cached_blocks
            and not scheduler.enable_chunked_prefill):
        return None
    return limit


def offers_runs(scheduler) -> bool:
    """The bulk schedulers (bulk_scheduler.py) offer runs of identical steps; the rules' own
    (scheduler.py, async_scheduling.py, static_batching.py) never do."""
    return hasattr(scheduler, "identical_decode_steps")


def repeat_identical_decode_steps(scheduler, clock, recorder, arrivals, clock_s: float,
                                  observers, wider: bool = True, admit=None) -> float:
    """After a step: when the scheduler is sure its coming steps are the same batch (NAIVE and
    STATIC between finishes; continuous batching of decodes alone, nobody admissible, or of
    decodes and one prompt's chunks), price and record those steps here without asking it
    again: every step still on its own, as main.simulate's loop would, until one would change
    something or an arrival is due that might (it must be admitted first). Returns the clock
    after them (`clock_s` if none ran). `wider`: BulkScheduler's wider runs (see its
    `identical_decode_steps`); one that ends finishing somebody may be followed by another.
    `admit`: main.admit_arrivals, for the arrivals a run goes on through (`arrivals_wait`: they
    only wait); without it, every arrival ends the run."""
    if not offers_runs(scheduler):
        return clock_s  # the rules, one step at a time
    finished = True
    while finished:
        clock_s, finished = _repeat_one_run(scheduler, clock, recorder, arrivals, clock_s,
                                            observers, wider, admit)
    return clock_s


def _repeat_one_run(scheduler, clock, recorder, arrivals, clock_s: float, observers,
                    wider: bool, admit=None) -> tuple[float, list[Request]]:
    """repeat_identical_decode_steps' one run: the clock after it, and whom it finished. An
    arrival due between two of its steps ends it, unless it can only wait (`run.arrivals_wait`)
    and `admit` is given: then it is admitted there, as the pass after that step would, and the
    steps before it are recorded with the queue as it was."""
    next_arrival_s = arrivals.next_arrival_s()
    if next_arrival_s is not None and next_arrival_s <= clock_s and not admit:
        return clock_s, []  # the next pass admits it first
    run = scheduler.identical_decode_steps(wider)
    if run is None:
        return clock_s, []
    observers, counters = split_token_counters(observers)
    counted = []  # (start, seconds) of each step, for the counters
    kv_cache = scheduler.kv_cache
    reserved, used = kv_cache.num_reserved_slots, kv_cache.num_used_slots
    context, last_token_s = run.num_context_tokens, run.last_token_s
    num_prompt_tokens, prompt_context = run.num_prompt_tokens, run.prompt_context_tokens
    steps, itls_s, step_ends_s = [], [], []  # for the recorder: (seconds, KV slots reserved,
    #                                          used) each, and the gaps; when each step ended
    seen = None  # the latest step, for observers
    for new_slots in run.new_slots_reserved:
        if next_arrival_s is not None and next_arrival_s <= clock_s:
            if not (admit and run.arrivals_wait):
                break
            if seen:  # (observed as the queue was)
                _observe_decode_run_step(observers, scheduler, *seen)
                seen = None
            next_arrival_s = _admit_waiting_arrivals(run, steps, itls_s, scheduler, recorder,
                                                     arrivals, admit, clock_s)
            steps, itls_s = [], []
        reserved, used = reserved + new_slots, used + run.num_sampled + num_prompt_tokens
        if num_prompt_tokens:
            step_s = clock.chunk_step_time_s(run.num_seqs, context, num_prompt_tokens,
                                             prompt_context)
        else:
            step_s = clock.decode_step_time_s(run.num_seqs, context)
        clock_s += step_s
        steps.append((step_s, reserved, used))
        itls_s.append(clock_s - last_token_s)
        if counters:
            counted.append((clock_s - step_s, step_s))
        if observers:
            if seen:  # the step before: observed now, the pool as it left it
                _observe_decode_run_step(observers, scheduler, *seen)
            seen = RunStepSeen(recorder.num_steps + len(steps) - 1, run, context,
                               clock_s - step_s, step_s, clock_s - last_token_s, reserved, used,
                               prompt_context)
        step_ends_s.append(clock_s)
        context += run.num_seqs
        prompt_context += num_prompt_tokens
        last_token_s = clock_s
    if not step_ends_s:
        return clock_s, []
    recorder.on_decode_run(run, steps, itls_s, num_waiting=len(scheduler.waiting))
    for count in counters:
        count.count_run_steps(counted, run.num_sampled)
    finished = scheduler.apply_decode_run(run, step_ends_s)
    if finished:  # by the run's last step: recorded, and their clients told, as after a step
        arrivals.on_finished(len(finished), clock_s)
        for request in finished:
            recorder.on_finished(request)
    if seen:  # the last step, observed once applied (as main.simulate shows a step)
        _observe_decode_run_step(observers, scheduler, *seen, finished=finished)
    return clock_s, finished


def _admit_waiting_arrivals(run: DecodeRun, steps: list, itls_s: list, scheduler, recorder,
                            arrivals, admit, clock_s: float) -> Optional[float]:
    """Arrivals due inside a run that can only wait (`run.arrivals_wait`): its steps so far
    are recorded with the queue as it was, then the arrivals are admitted, as the pass after
    the latest step would. Returns the next arrival's time."""
    if steps:
        recorder.on_decode_run(run, steps, itls_s, num_waiting=len(scheduler.waiting))
    admit(arrivals, scheduler, recorder, clock_s)
    if scheduler.waiting and run.admission_limit is None:  # a run of chunks: the budget
        run.admission_limit = AdmissionLimit.TOKEN_BUDGET   # keeps them out
    return arrivals.next_arrival_s()


def repeat_identical_steps(steps, recorder, arrivals, clock_s: float, observers,
                           admit=None) -> float:
    """After a pass of main.simulate's loop (`steps`: its SyncSteps or async scheduling's
    BatchQueue), the coming identical steps, if the scheduler is sure of some (`admit`: see
    repeat_identical_decode_steps). Returns the clock after them (`clock_s` if none ran)."""
    if isinstance(steps, BatchQueue) and offers_runs(steps.scheduler):
        return repeat_identical_queued_steps(steps, recorder, arrivals, clock_s, observers,
                                             admit)
    return repeat_identical_decode_steps(steps.scheduler, steps.clock, recorder, arrivals,
                                         clock_s, observers, admit=admit)


def repeat_identical_queued_steps(queue, recorder, arrivals, clock_s: float, observers,
                                  admit=None) -> float:
    """repeat_identical_decode_steps under async scheduling (`queue`: the engine's BatchQueue):
    each coming step is a pass of the queue, timed as BatchQueue.step times it: the batch it
    schedules starts when the one in flight ends, and that one's output is read then (which
    moves the engine's clock). Returns the clock after them (`clock_s` if none ran)."""
    next_arrival_s = arrivals.next_arrival_s()
    if next_arrival_s is not None and next_arrival_s <= clock_s and not admit:
        return clock_s  # the next pass admits it first
    scheduler, clock = queue.scheduler, queue.clock
    run = scheduler.identical_decode_steps()
    if run is None:
        return clock_s
    kv_cache = scheduler.kv_cache
    reserved, used = kv_cache.num_reserved_slots, kv_cache.num_used_slots
    context, last_token_s = run.num_context_tokens, run.last_token_s
    batch, previous_end_s = queue.in_flight
    steps, itls_s, reads_s = [], [], []  # as in repeat_identical_decode_steps
    observers, counters = split_token_counters(observers)
    counted = []
    for new_slots in run.new_slots_reserved:
        if next_arrival_s is not None and next_arrival_s <= clock_s:
            if not (admit and run.arrivals_wait):
                break
            next_arrival_s = _admit_waiting_arrivals(run, steps, itls_s, scheduler, recorder,
                                                     arrivals, admit, clock_s)
            steps, itls_s = [], []
        reserved, used = reserved + new_slots, used + run.num_sampled
        step_s = clock.decode_step_time_s(run.num_seqs, context)
        start_s = max(clock_s, queue.gpu_free_s)
        queue.gpu_free_s = start_s + step_s
        clock_s = max(clock_s, previous_end_s)  # the batch before is read when it ends
        previous_end_s = queue.gpu_free_s
        steps.append((step_s, reserved, used))
        itls_s.append(clock_s - last_token_s)
        if counters:
            counted.append((start_s, step_s))
        if observers:
            _observe_decode_run_step(observers, scheduler, recorder.num_steps + len(steps) - 1,
                                     run, context, start_s, step_s, clock_s - last_token_s,
                                     reserved, used)
        reads_s.append(clock_s)
        context += run.num_seqs
        last_token_s = clock_s
    if reads_s:
        recorder.on_decode_run(run, steps, itls_s, num_waiting=len(scheduler.waiting))
        for count in counters:
            count.count_run_steps(counted, run.num_sampled)
        # The run's last batch samples the same requests as the batch in flight before it did:
        # that batch (and the scheduler's sampling list of it) stands for it, ending later.
        queue.in_flight = (batch, previous_end_s)
        scheduler.apply_decode_run(run, reads_s)
    return clock_s


def split_token_counters(observers) -> tuple[list, list]:
    """The observers that are shown each step of a run, and apart from them those that count
    only its output tokens (`count_run_steps`: reports/timeseries.OutputTokensPerSecond, run's
    peak), which are handed the run's steps at once, (start, seconds) each, with no EngineStep
    built for every step."""
    if not observers:
        return [], []
    counters = [observe for observe in observers if hasattr(observe, "count_run_steps")]
    return [observe for observe in observers if observe not in counters], counters


class RunStepSeen(NamedTuple):
    """One step of a run, as an observer is shown it."""
    index: int
    run: DecodeRun
    context: int           # the decodes' context (tokens) when it began
    start_s: float
    step_s: float
    itl_s: float
    reserved: int          # KV slots reserved, and used, while it ran
    used: int
    prompt_context: int    # the prompt's context (its chunk's), if it has a prompt


def _observe_decode_run_step(observers, scheduler, index, run, context, start_s, step_s,
                             itl_s, reserved, used, prompt_context: int = 0,
                             finished: Optional[list[Request]] = None) -> None:
    """What an observer of sums (a chart) sees of one repeated step: the step as it ran. The
    run not applied yet (`finished` None), the pool is as before it; applied, as after it."""
    batch = SchedulerOutput()
    batch.add_decodes(run.num_seqs, context)
    if run.prompt is not None:
        batch.add(run.prompt, run.num_prompt_tokens, prompt_context)
    batch.num_padding_tokens = run.num_padding_tokens
    result = StepResult(num_bulk_sampled=run.num_sampled, itls=[(itl_s, run.num_sampled)],
                        finished=finished or [])
    free_blocks = scheduler.num_free_blocks
    if free_blocks is not None and finished is None:  # what the run's steps take, until then
        kv_cache = scheduler.kv_cache
        free_blocks -= (reserved - kv_cache.num_reserved_slots) // kv_cache.block_size
    for observe in observers:
        observe(EngineStep(index, start_s, step_s, batch, result,
                           len(scheduler.running), len(scheduler.waiting), free_blocks, reserved,
                           used))
