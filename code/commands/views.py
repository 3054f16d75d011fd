"""What `compare`, `run` and `sweep` do once cli.py has turned their flags into checked objects.

Each command makes the same three moves, so that a mistake never leaves a half-written file:

    check   every output path, before anything runs         output_files.check_writable
    serve   the workload in each mode, with the observers
            the outputs need (charts, timeline, ...)          observers.serve_modes
    show    the text for stdout; the files, whole, only
            after every simulation and rendering succeeded    output_files.PendingFiles

The text is returned, not printed, so that cli.py stays the one place that talks to the terminal.
"""

from dataclasses import dataclass, field
from typing import Optional

from reports import plots
from reports import tables as report
from commands import sweep
from config import EngineConfig
from commands.detailed import detailed_lists
from goodput import add_request_goodput, describe_slos
from gpu_memory import MemoryPlan, lookup
from metrics import serving_metrics
from commands.serving import Watch, serve_modes
from commands.output_files import PendingFiles, check_writable
from commands.step_log import StepLog
from reports.timeline import LEGEND as TIMELINE_LEGEND
from reports.timeline import TimelineSpec, render_timeline
from reports.timeseries import peak_output_tokens_per_s


@dataclass
class Setup:
    """The engine side of a command: every input already checked."""
    config: EngineConfig
    modes: list
    plan: MemoryPlan
    clock: object
    slos_ms: dict  # --goodput targets, ms; {} when not given


@dataclass
class Outputs:
    """What to show and which files to write, as the flags asked."""
    format: str = "table"                       # "table" or "json" on stdout
    svg: Optional[str] = None                   # --svg PATH
    timeline: Optional[TimelineSpec] = None     # --timeline / --timeline-at
    step_log: Optional[str] = None              # --step-log FILE
    save_detailed: Optional[str] = None         # --save-detailed FILE
    percentiles: list[float] = field(default_factory=lambda: [99.0])
    percentile_metrics: list[str] = field(default_factory=lambda: list(report.PERCENTILE_METRICS))


def compare_modes(setup: Setup, workload, outputs: Outputs, simulate) -> str:
    """The modes side by side: the table (or JSON), then any timelines; charts to --svg."""
    pending = _check_files(outputs)
    watch = Watch(series=outputs.svg is not None, timeline=outputs.timeline,
                  step_log=pending.step_log)

    def show() -> str:
        runs = serve_modes(simulate, workload, setup.modes, setup.config,
                           setup.plan.num_gpu_blocks, setup.clock, watch)
        recorders = [(run.name, run.recorder) for run in runs]
        results = [(run.name, add_request_goodput(run.recorder.summary(), run.recorder,
                                                  setup.slos_ms)) for run in runs]
        if outputs.svg:
            pending.add_text(outputs.svg, plots.runs_svg(_title_lines(setup, workload), runs,
                                                         setup.plan.num_gpu_blocks))
        if outputs.format == "json":
            return report.to_json(setup.config, setup.plan, workload, results, recorders)
        columns = report.COLUMNS + ([report.GOODPUT_COLUMN] if setup.slos_ms else [])
        lines = _title_lines(setup, workload) + describe_slos(setup.slos_ms)
        lines += [""] + report.comparison_table(results, columns)
        lines += report.rejection_lines(recorders)
        lines += [""] + report.takeaways(dict(results), setup.config.forward_model)
        for run in runs:
            if run.timeline:
                lines += [""] + render_timeline(run.name, run.timeline)
        if outputs.timeline:
            lines += TIMELINE_LEGEND
        return "\n".join(lines)
    return _show_then_write(pending, show)


def run_in_depth(setup: Setup, workload, outputs: Outputs, simulate) -> str:
    """One mode in depth: vllm bench serve's result block (or JSON), a timeline, charts."""
    pending = _check_files(outputs)
    watch = Watch(series=True, timeline=outputs.timeline, step_log=pending.step_log,
                  token_times=outputs.save_detailed is not None)

    def show() -> str:
        [mode_run] = serve_modes(simulate, workload, setup.modes, setup.config,
                                 setup.plan.num_gpu_blocks, setup.clock, watch)
        name, recorder = mode_run.name, mode_run.recorder
        first_arrival_s = min((r.arrival_s for r in recorder.completed()), default=0.0)
        metrics = serving_metrics(recorder, outputs.percentiles, setup.slos_ms,
                                  peak_output_tokens_per_s(mode_run.series, first_arrival_s))
        if outputs.svg:
            pending.add_text(outputs.svg, plots.runs_svg(_title_lines(setup, workload),
                                                         [mode_run], setup.plan.num_gpu_blocks))
        if outputs.save_detailed:
            detailed = {**metrics, **detailed_lists(recorder, mode_run.token_times)}
            pending.add_text(outputs.save_detailed, report.to_json(
                setup.config, setup.plan, workload, [(name, detailed)], [(name, recorder)],
                indent=None) + "\n")
        if outputs.format == "json":
            return report.to_json(setup.config, setup.plan, workload, [(name, metrics)],
                                  [(name, recorder)])
        mode = setup.modes[0]
        lines = _title_lines(setup, workload) + describe_slos(setup.slos_ms)
        lines += [f"mode: {mode.name} ({mode.summary})", ""]
        lines += report.serving_result_block(metrics, outputs.percentiles,
                                             outputs.percentile_metrics, workload.params)
        lines += report.rejection_lines([(name, recorder)])
        if mode_run.timeline:
            lines += [""] + render_timeline(name, mode_run.timeline) + TIMELINE_LEGEND
        return "\n".join(lines)
    return _show_then_write(pending, show)


def sweep_loads(setup: Setup, load_name: str, workloads: list, outputs: Outputs, simulate) -> str:
    """Each mode at each load: the table (or JSON) of the latency-throughput curve; --svg."""
    pending = _check_files(outputs)

    def show() -> str:
        points = sweep.run_points(simulate, setup.modes, workloads, setup.config,
                                       setup.plan.num_gpu_blocks, setup.clock, load_name,
                                       setup.slos_ms)
        first_workload = workloads[0][1]
        title, _, workload_line = _title_lines(setup, first_workload)
        header = [title, workload_line, sweep.sweep_line(points)]
        header += describe_slos(setup.slos_ms)
        if outputs.svg:
            pending.add_text(outputs.svg, plots.sweep_svg(header, points))
        if outputs.format == "json":
            return sweep.sweep_json(setup.config, setup.plan, first_workload.params,
                                         setup.slos_ms, points)
        lines = _title_lines(setup, first_workload) + header[2:]
        lines += [""] + sweep.sweep_table(points)
        return "\n".join(lines + [""] + sweep.saturation_lines(points))
    return _show_then_write(pending, show)


def _check_files(outputs: Outputs) -> PendingFiles:
    """Every output path checked now, before any simulation; the step log opened if asked."""
    for flag, path in (("--svg", outputs.svg), ("--save-detailed", outputs.save_detailed),
                       ("--step-log", outputs.step_log)):
        if path is not None:
            check_writable(flag, path)
    pending = PendingFiles()
    if outputs.step_log:
        pending.step_log = StepLog(outputs.step_log)
    return pending


def _show_then_write(pending: PendingFiles, show) -> str:
    """Serve and render (`show()`); write the files only if that succeeded."""
    try:
        text = show()
    except BaseException:
        pending.discard()
        raise
    pending.commit()
    return text


def _title_lines(setup: Setup, workload) -> list[str]:
    model, gpu = lookup(setup.config)
    return report.header_lines(setup.config, setup.plan, model.name, gpu.name, workload)
