"""The speed room's fast-forward: runs of identical steps, priced and recorded without asking
the scheduler again.

After a step, a bulk scheduler (bulk_scheduler.py) may be sure that its coming steps are the
same batch, step after step (`identical_decode_steps`, a `DecodeRun`): decodes alone with nobody
admissible, or decodes and one prompt's chunks, up to a step that would change something. This
module's loops then take those steps one by one as main.simulate's loop would, each priced on
the clock and recorded on its own, and hand the scheduler their end times at once
(`apply_decode_run`):

    repeat_identical_steps          main.simulate's call after every pass: one of the two below
    repeat_identical_decode_steps   synchronous scheduling (and a cluster's replicas)
    repeat_identical_queued_steps   async scheduling: each step timed as the engine's batch
                                    queue times it (a batch starts when the one before ends,
                                    whose output is read then)

Nothing here is a rule of vLLM's scheduler, and nothing here changes a result: the steps are
the ones the rules would take, with the same sums (tests/test_bulk_scheduler.py).
"""

from typing import NamedTuple, Optional

from batch import DecodeRun, EngineStep, SchedulerOutput, StepResult
from bulk_scheduler import BULK_SCHEDULERS, AsyncBulkScheduler
from request import Request




def repeat_identical_decode_steps(scheduler, clock, recorder, arrivals, clock_s: float,
                                  observers, wider: bool = True) -> float:
    """After a step: when the scheduler is sure its coming steps are the same batch (NAIVE and
    STATIC between finishes; continuous batching of decodes alone, nobody admissible, or of
    decodes and one prompt's chunks), price and record those steps here without asking it
    again: every step still on its own, as main.simulate's loop would, until one would change
    something or an arrival is due (it must be admitted first). Returns the clock after them
    (`clock_s` if none ran). `wider`: BulkScheduler's wider runs (see its
    `identical_decode_steps`); one that ends finishing somebody may be followed by another."""
    if not isinstance(scheduler, BULK_SCHEDULERS):
        return clock_s  # the rules, one step at a time
    finished = True
    while finished:
        clock_s, finished = _repeat_one_run(scheduler, clock, recorder, arrivals, clock_s,
                                            observers, wider)
    return clock_s


def _repeat_one_run(scheduler, clock, recorder, arrivals, clock_s: float, observers,
                    wider: bool) -> tuple[float, list[Request]]:
    """repeat_identical_decode_steps' one run: the clock after it, and whom it finished."""
    next_arrival_s = arrivals.next_arrival_s()
    if next_arrival_s is not None and next_arrival_s <= clock_s:
        return clock_s, []  # the next pass admits it first
    run = scheduler.identical_decode_steps(wider)
    if run is None:
        return clock_s, []
    kv_cache = scheduler.kv_cache
    reserved, used = kv_cache.num_reserved_slots, kv_cache.num_used_slots
    context, last_token_s = run.num_context_tokens, run.last_token_s
    num_prompt_tokens, prompt_context = run.num_prompt_tokens, run.prompt_context_tokens
    steps, itls_s, step_ends_s = [], [], []  # for the recorder: (seconds, KV slots reserved,
    #                                          used) each, and the gaps; when each step ended
    seen = None  # the latest step, for observers
    for new_slots in run.new_slots_reserved:
        if next_arrival_s is not None and next_arrival_s <= clock_s:
            break
        reserved, used = reserved + new_slots, used + run.num_sampled + num_prompt_tokens
        if num_prompt_tokens:
            step_s = clock.chunk_step_time_s(run.num_seqs, context, num_prompt_tokens,
                                             prompt_context)
        else:
            step_s = clock.decode_step_time_s(run.num_seqs, context)
        clock_s += step_s
        steps.append((step_s, reserved, used))
        itls_s.append(clock_s - last_token_s)
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
    if not steps:
        return clock_s, []
    recorder.on_decode_run(run, steps, itls_s, num_waiting=len(scheduler.waiting))
    finished = scheduler.apply_decode_run(run, step_ends_s)
    if finished:  # by the run's last step: recorded, and their clients told, as after a step
        arrivals.on_finished(len(finished), clock_s)
        for request in finished:
            recorder.on_finished(request)
    if seen:  # the last step, observed once applied (as main.simulate shows a step)
        _observe_decode_run_step(observers, scheduler, *seen, finished=finished)
    return clock_s, finished


def repeat_identical_steps(steps, recorder, arrivals, clock_s: float, observers) -> float:
    """After a pass of main.simulate's loop (`steps`: its SyncSteps or async scheduling's
    BatchQueue), the coming identical steps, if the scheduler is sure of some.
    Returns the clock after them (`clock_s` if none ran)."""
    if isinstance(steps.scheduler, AsyncBulkScheduler):
        return repeat_identical_queued_steps(steps, recorder, arrivals, clock_s, observers)
    return repeat_identical_decode_steps(steps.scheduler, steps.clock, recorder, arrivals,
                                         clock_s, observers)


def repeat_identical_queued_steps(queue, recorder, arrivals, clock_s: float,
                                  observers) -> float:
    """repeat_identical_decode_steps under async scheduling (`queue`: the engine's BatchQueue):
    each coming step is a pass of the queue, timed as BatchQueue.step times it: the batch it
    schedules starts when the one in flight ends, and that one's output is read then (which
    moves the engine's clock). Returns the clock after them (`clock_s` if none ran)."""
    next_arrival_s = arrivals.next_arrival_s()
    if next_arrival_s is not None and next_arrival_s <= clock_s:
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
    for new_slots in run.new_slots_reserved:
        if next_arrival_s is not None and next_arrival_s <= clock_s:
            break
        reserved, used = reserved + new_slots, used + run.num_sampled
        step_s = clock.decode_step_time_s(run.num_seqs, context)
        start_s = max(clock_s, queue.gpu_free_s)
        queue.gpu_free_s = start_s + step_s
        clock_s = max(clock_s, previous_end_s)  # the batch before is read when it ends
        previous_end_s = queue.gpu_free_s
        steps.append((step_s, reserved, used))
        itls_s.append(clock_s - last_token_s)
        if observers:
            _observe_decode_run_step(observers, scheduler, recorder.num_steps + len(steps) - 1,
                                     run, context, start_s, step_s, clock_s - last_token_s,
                                     reserved, used)
        reads_s.append(clock_s)
        context += run.num_seqs
        last_token_s = clock_s
    if steps:
        recorder.on_decode_run(run, steps, itls_s, num_waiting=len(scheduler.waiting))
        # The run's last batch samples the same requests as the batch in flight before it did:
        # that batch (and the scheduler's sampling list of it) stands for it, ending later.
        queue.in_flight = (batch, previous_end_s)
        scheduler.apply_decode_run(run, reads_s)
    return clock_s


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
