"""servesim: the scheduler of an LLM serving engine, on a virtual clock.

    python3 code/main.py            # compare: the four modes side by side on a mixed workload
    python3 code/main.py --help     # the commands: compare, run, sweep, kv-waste, lesson-check,
                                    # diagnose, presets, calibration

One engine loop (`simulate`, below) serves a stream of requests in any of four modes. Read it
like the lesson's `while True`: admit arrivals, let the scheduler build a batch, price the batch
on the virtual clock, advance the clock, apply the step. Then read, one lesson concept a file:

    request.py  kv_cache.py  block_pool.py  batch.py  scheduler.py  static_batching.py
    modes.py  config.py  spec_decode.py  forward_model.py  gpu_memory.py  presets.py
    workload.py  arrivals.py  metrics.py  engine_counters.py  goodput.py
    bulk_scheduler.py  running_decodes.py  (speed only: the same schedulers, a step costing
                                            what changes in it)

The shell around the engine (commands, reports, trace formats) lives in code/commands,
code/reports and code/traces; README.md lists every file in reading order.
"""

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

from batch import BatchScheduler, EngineStep  # noqa: E402
from bulk_scheduler import repeat_identical_decode_steps  # noqa: E402
from config import Knobs  # noqa: E402
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
    arrivals = workload.arrivals()
    recorder = RunRecorder(kv_cache.num_total_slots, mode.caches_prefixes(config))
    clock_s = 0.0
    while True:
        admit_arrivals(arrivals, scheduler, recorder, clock_s)
        if not scheduler.has_unfinished_requests() and arrivals.next_arrival_s() is None:
            return recorder
        batch = scheduler.schedule(clock_s)                   # who runs, how many tokens each
        if batch.is_empty:
            if not batch.preempted:                           # idle: jump to the next event
                clock_s = next_event_s(arrivals, scheduler, clock_s)
            continue
        step_s = clock.step_time_s(batch)                     # price it on the virtual clock
        reserved, used = kv_cache.num_reserved_slots, kv_cache.num_used_slots
        clock_s += step_s
        result = scheduler.update_from_output(batch, clock_s)  # tokens out, finished freed
        arrivals.on_finished(len(result.finished), clock_s)
        recorder.on_step(step_s, batch, result, reserved, used, start_s=clock_s - step_s,
                         num_waiting=len(scheduler.waiting))
        for observe in observers:
            observe(EngineStep(recorder.num_steps - 1, clock_s - step_s, step_s, batch, result,
                               len(scheduler.running), len(scheduler.waiting),
                               scheduler.num_free_blocks, reserved, used, kv_cache.block_tables))
        if progress:
            progress(recorder, clock_s)
        clock_s = repeat_identical_decode_steps(scheduler, clock, recorder, arrivals, clock_s,
                                                observers)  # speed only: bulk_scheduler.py


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
    return Knobs(compared_modes=tuple(COMPARED_MODES), max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
                 block_size=BLOCK_SIZE, max_num_seqs=MAX_NUM_SEQS)


if __name__ == "__main__":
    from commands.cli import main as command_line  # the shell loads only when run as a program
    sys.exit(command_line(sys.argv[1:], simulate, knobs()))
