"""Watching the engine: the observers a command hooks into `simulate`, and what they saw.

Every run has a `RunRecorder` (the metrics). What else to keep depends on what the user asked
to see, so a command lists it in a `Watch` and gets back one `ModeRun` per mode:

    --svg, run's block    StepSeries       one sample per step (timeseries.py)
    --timeline            TimelineWindow   the few steps to draw (timeline.py)
    --save-detailed       TokenTimes       every token's time, per request (detailed.py)
    --step-log            StepLog          one JSON line per step (step_log.py)

Nothing is attached that was not asked for: with no observers the engine loop does no extra work.
"""

from dataclasses import dataclass
from typing import Optional

from commands.detailed import TokenTimes
from metrics import RunRecorder
from commands.step_log import StepLog
from reports.timeline import TimelineSpec, TimelineWindow
from reports.timeseries import StepSeries


@dataclass
class Watch:
    series: bool = False
    timeline: Optional[TimelineSpec] = None
    token_times: bool = False
    step_log: Optional[StepLog] = None


@dataclass
class ModeRun:
    name: str
    recorder: RunRecorder
    series: Optional[StepSeries] = None
    timeline: Optional[TimelineWindow] = None
    token_times: Optional[TokenTimes] = None


def serve_modes(simulate, workload, modes, config, num_gpu_blocks, clock,
                watch: Watch) -> list[ModeRun]:
    """Serve the same workload in each mode, with the observers `watch` asks for."""
    runs = []
    for mode in modes:
        series = StepSeries(mode.name, config.block_size) if watch.series else None
        timeline = TimelineWindow(watch.timeline) if watch.timeline else None
        token_times = TokenTimes() if watch.token_times else None
        observers = [o for o in (series, timeline, token_times) if o is not None]
        if watch.step_log:
            observers.append(watch.step_log.observer(mode.name))
        recorder = simulate(workload, mode, config, num_gpu_blocks, clock, observers)
        runs.append(ModeRun(mode.name, recorder, series, timeline, token_times))
    return runs
