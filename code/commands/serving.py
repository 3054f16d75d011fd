"""Serving a workload for a command: the checked engine setup, and the observers it attaches.

`Engine` is everything a command needs to serve: the checked config, the modes, the memory plan,
the clock, the goodput SLOs, and the engine loop itself (`main.simulate`, handed in by main.py).

Every run has a `RunRecorder` (the metrics). What else to keep depends on what the user asked
to see, so a command lists it in a `Watch` and gets back one `ModeRun` per mode:

    --svg, run's block    StepSeries       one sample per step (reports/timeseries.py)
    --timeline            TimelineWindow   the few steps to draw (reports/timeline.py)
    --save-detailed       TokenTimes       every token's time, per request (detailed.py)
    --step-log            StepLog          one JSON line per step (step_log.py)
    --block-table ID      BlockTableWatch  one request's block table (reports/block_table.py)
    --html, --explain     StepRecorder     every step and its reasons (reports/step_record.py)

Nothing is attached that was not asked for: with no observers the engine loop does no extra work.
With SERVESIM_CHECK_INVARIANTS set (the tests set it), every run is also checked, step by step,
by invariants.py.
"""

from dataclasses import dataclass
from typing import Callable, Optional

from commands import invariants
from commands.detailed import TokenTimes
from commands.invariants import InvariantChecker
from commands.progress import Progress
from commands.step_log import StepLog
from config import EngineConfig
from gpu_memory import MemoryPlan, lookup
from metrics import RunRecorder
from reports.block_table import BlockTableWatch
from reports.step_record import StepRecorder
from reports.tables import header_lines
from reports.timeline import TimelineSpec, TimelineWindow
from reports.timeseries import StepSeries
from workload import WorkloadError


@dataclass(frozen=True)
class Engine:
    """The engine side of a command, every input already checked."""
    simulate: Callable  # main.simulate
    config: EngineConfig
    modes: list
    plan: MemoryPlan
    clock: object
    slos_ms: dict       # --goodput targets, ms; {} when not given
    show_progress: bool = False  # a progress line on stderr for long runs (progress.py)

    def serve(self, workload, mode, observers=()) -> RunRecorder:
        checking = invariants.wanted()  # off unless SERVESIM_CHECK_INVARIANTS is set (tests)
        if checking:
            checker = InvariantChecker(mode, self.config, checking == "every-request")
            recorder = self._simulate(workload, checker, mode.name, [*observers, checker])
            checker.check_end(recorder, workload)
            return recorder
        return self._simulate(workload, mode, mode.name, observers)

    def _simulate(self, workload, mode, mode_name: str, observers) -> RunRecorder:
        """`mode` is a mode, or an InvariantChecker standing before one."""
        if not self.show_progress:
            return self.simulate(workload, mode, self.config, self.plan.num_gpu_blocks,
                                 self.clock, observers)
        num_requests = workload.params.get("num_requests") or workload.params.get("num_prompts")
        progress = Progress(mode_name, num_requests)
        try:
            return self.simulate(workload, mode, self.config, self.plan.num_gpu_blocks,
                                 self.clock, observers, progress)
        finally:
            progress.clear()

    def title_lines(self, workload) -> list[str]:
        """The report header: model, GPU, clock, KV cache, workload."""
        model, gpu = lookup(self.config)
        return header_lines(self.config, self.plan, model.name, gpu.name, workload)


@dataclass
class Watch:
    series: bool = False
    timeline: Optional[TimelineSpec] = None
    token_times: bool = False
    step_log: Optional[StepLog] = None
    block_table: Optional[str] = None  # the request id whose table to draw
    steps: Optional[Callable] = None   # makes a StepRecorder for a mode (--html, --explain)


@dataclass
class ModeRun:
    name: str
    recorder: RunRecorder
    series: Optional[StepSeries] = None
    timeline: Optional[TimelineWindow] = None
    token_times: Optional[TokenTimes] = None
    block_table: Optional[BlockTableWatch] = None
    steps: Optional[StepRecorder] = None


def serve_modes(engine: Engine, workload, watch: Watch) -> list[ModeRun]:
    """Serve the same workload in each mode, with the observers `watch` asks for."""
    runs = []
    for mode in engine.modes:
        series = None
        if watch.series:
            series = StepSeries(mode.name, engine.config.block_size, is_paged=mode.is_paged)
        timeline = TimelineWindow(watch.timeline) if watch.timeline else None
        token_times = TokenTimes() if watch.token_times else None
        block_table = None
        if watch.block_table is not None:
            block_table = BlockTableWatch(watch.block_table, engine.config.block_size)
        observers = [o for o in (series, timeline, token_times, block_table) if o is not None]
        if watch.step_log:
            observers.append(watch.step_log.observer(mode.name,
                                                     mode.caches_prefixes(engine.config)))
        steps = watch.steps(mode) if watch.steps else None
        if steps:  # it stands before the mode, and watches every step
            recorder = engine.serve(workload, steps, [*observers, steps])
        else:
            recorder = engine.serve(workload, mode, observers)
        runs.append(ModeRun(mode.name, recorder, series, timeline, token_times, block_table,
                            steps))
    return runs


def require_completions(recorder: RunRecorder) -> None:
    """A run in which no request completed has no latency or throughput to show: say why, in
    one line (exit status 2), instead of a table of zeros."""
    if recorder.num_completed:
        return
    rejected = recorder.rejections()  # every request that did not complete was rejected
    longest = max(rejection.prompt_len for rejection in rejected)
    raise WorkloadError(
        f"no request completed: all {len(rejected)} were rejected (e.g. request "
        f"{rejected[0].request_id}: {rejected[0].reject_reason}); the longest prompt has "
        f"{longest:,} tokens, so --max-model-len must be above that")
