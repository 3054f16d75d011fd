"""servesim: the scheduler of an LLM serving engine, on a virtual clock.

    python3 code/main.py            # compare: the four modes side by side on a mixed workload
    python3 code/main.py --help     # the commands: compare, run, sweep, kv-waste, lesson-check,
                                    # diagnose, presets, calibration

One engine loop (`simulate`, below) serves a stream of requests in any of four modes. Read it
like the lesson's `while True`: admit arrivals, let the scheduler build a batch, price the batch
on the virtual clock, advance the clock, apply the step. Then read, one lesson concept a file:

    request.py  kv_cache.py  block_pool.py  batch.py  scheduler.py  async_scheduling.py
    static_batching.py  modes.py  config.py  spec_decode.py  forward_model.py
    engine_overhead.py  gpu_memory.py  presets.py  model_config.py  moe.py  mla.py
    workload.py  arrivals.py  metrics.py  engine_counters.py  goodput.py
    bulk_scheduler.py  running_decodes.py  decode_runs.py  (speed only: the same schedulers,
                                            a step costing what changes in it)

The shell around the engine (commands, reports, trace formats) lives in code/commands,
code/reports and code/traces; README.md lists every file in reading order.
"""

if __name__ == "__main__":  # a signal while the modules load: one line, not a traceback
    from commands import stopping
    stopping.install()

import random
import sys

# ── Knobs for the exercises: edit them and rerun; a flag given on the command line wins ─────────
COMPARED_MODES = ["naive", "static", "continuous", "chunked"]  # compare's rows (--mode); drop
#                                                                 "chunked" to see it without
MAX_NUM_BATCHED_TOKENS = 512   # CONTINUOUS+CHUNKED's token budget per step: the lesson's 512-token
#                                slices (--max-num-batched-tokens sets every continuous mode's;
#                                CONTINUOUS otherwise keeps vLLM's max(max_model_len, 2048))
BLOCK_SIZE = 16                # tokens per KV block (--block-size): 1, 2, 4, 8 or a multiple of 16
MAX_NUM_SEQS = 256             # most requests per batch (--max-num-seqs); STATIC's batch size
# ─────────────────────────────────────────────────────────────────────────────────────────────

from async_scheduling import BatchQueue  # noqa: E402
from batch import BatchScheduler, EngineCall, EngineStep, StepResult  # noqa: E402
from decode_runs import repeat_identical_steps  # noqa: E402
from config import Knobs  # noqa: E402
from forward_model import synchronous  # noqa: E402
from metrics import RunRecorder  # noqa: E402


def simulate(workload, mode, config, num_gpu_blocks, clock, observers=(),
             progress=None) -> RunRecorder:
    """Serve every request of `workload` in `mode`; return what was recorded. `progress`, if
    given, is called with the recorder and the clock after every step (to report a long run)."""
    # Speculative decoding draws how many drafts the target accepts: from this generator,
    # seeded by the workload's --seed (0 for a trace), so a run gives the same bytes every time.
    acceptance_rng = random.Random(f"acceptance {workload.params.get('seed', 0)}")
    in_bulk = not any(needs_every_request(observe) for observe in observers)
    scheduler: BatchScheduler = mode.make_scheduler(config, num_gpu_blocks, acceptance_rng,
                                                    in_bulk)
    kv_cache = scheduler.kv_cache
    if mode.uses_async_scheduling(config):
        steps = BatchQueue(scheduler, clock)     # step n+1 scheduled while step n runs
    else:
        clock = synchronous(clock)               # the CPU's work adds to the GPU's
        steps = SyncSteps(scheduler, clock)
    arrivals = workload.arrivals()
    recorder = RunRecorder(kv_cache.num_total_slots, mode.caches_prefixes(config))
    clock_s = 0.0
    while True:
        admit_arrivals(arrivals, scheduler, recorder, clock_s)
        if not scheduler.has_unfinished_requests() and arrivals.next_arrival_s() is None:
            return recorder
        call = steps.step(clock_s)               # schedule a batch, run it, read an output
        batch, result, step_s = call.batch, call.result, call.step_s
        if not call.ran:
            if not batch.preempted:                           # idle: jump to the next event
                clock_s = next_event_s(arrivals, scheduler, clock_s)
            continue
        reserved, used = call.kv_reserved_slots, call.kv_used_slots
        clock_s = call.now_s
        arrivals.on_finished(len(result.finished), clock_s)
        recorder.on_step(step_s, batch, result, reserved, used, start_s=call.start_s,
                         num_waiting=len(scheduler.waiting))
        for observe in observers:
            observe(EngineStep(recorder.num_steps - 1, call.start_s, step_s, batch, result,
                               len(scheduler.running), len(scheduler.waiting),
                               scheduler.num_free_blocks, reserved, used, kv_cache.block_tables))
        if progress:
            progress(recorder, clock_s)
        clock_s = repeat_identical_steps(steps, recorder, arrivals, clock_s, observers,
                                         admit_arrivals)  # speed only: decode_runs.py


class SyncSteps:
    """Synchronous scheduling, the lesson's loop body: schedule a batch (who runs, how many
    tokens each), price it on the virtual clock, advance the clock, apply it (tokens out,
    finished requests freed). async_scheduling.BatchQueue is the other way."""

    def __init__(self, scheduler: BatchScheduler, clock):
        self.scheduler = scheduler
        self.clock = clock

    def step(self, now_s: float) -> EngineCall:
        scheduler, kv_cache = self.scheduler, self.scheduler.kv_cache
        batch = scheduler.schedule(now_s)
        reserved, used = kv_cache.num_reserved_slots, kv_cache.num_used_slots
        if batch.is_empty:
            return EngineCall(batch, StepResult(), now_s, 0.0, now_s, reserved, used, ran=False)
        step_s = self.clock.step_time_s(batch)
        result = scheduler.update_from_output(batch, now_s + step_s)
        return EngineCall(batch, result, now_s, step_s, now_s + step_s, reserved, used)


def needs_every_request(observer) -> bool:
    """Does this observer read each request of every step (a step log, a timeline), or only the
    step's sums (a chart)? With none of the first kind attached, the mode picks a scheduler
    that counts the running decodes in bulk (bulk_scheduler.py): same decisions, less work."""
    return getattr(observer, "needs_every_request", True)


def admit_arrivals(arrivals, scheduler: BatchScheduler, recorder, clock_s) -> None:
    """Hand every request that has arrived by now to the scheduler (which may reject it)."""
    arrived = arrivals.pop_arrived(clock_s)
    while arrived:
        num_rejected = 0
        for request in arrived:
            recorder.on_arrival(request)
            scheduler.add_request(request)
            if request.is_finished:  # rejected on arrival: it can never run
                recorder.on_finished(request)
                num_rejected += 1
        arrivals.on_finished(num_rejected, clock_s)  # a rejected client may send its next one
        arrived = arrivals.pop_arrived(clock_s) if num_rejected else []


def next_event_s(arrivals, scheduler: BatchScheduler, clock_s) -> float:
    """The idle engine's next wake-up: an arrival, or STATIC's batching window running out."""
    events = [t for t in (arrivals.next_arrival_s(), scheduler.next_wakeup_s()) if t is not None]
    if not events:
        raise RuntimeError(f"engine stalled at t={clock_s:.3f}s with requests left and nothing "
                           "to wait for: a scheduler bug")
    return max(clock_s, min(events))


def knobs() -> Knobs:
    """The knob block at the top of this file, as every command reads it."""
    return Knobs(compared_modes=COMPARED_MODES, max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
                 block_size=BLOCK_SIZE, max_num_seqs=MAX_NUM_SEQS)


if __name__ == "__main__":
    from commands.cli import main as command_line  # the shell loads only when run as a program
    sys.exit(command_line(sys.argv[1:], simulate, knobs()))
