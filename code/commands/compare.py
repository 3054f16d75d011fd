"""`compare` (the default command): one workload served in each mode, side by side.

    check   every flag and output path, before anything runs          flags.py, output_files.py
    serve   the workload in each mode, with the observers the
            outputs need (charts, timeline, step log)                   serving.py
    show    the table (or JSON) and any timelines; the files, whole,
            only once every simulation and rendering succeeded         reports/
"""

import argparse

from commands import cluster_flags, draws, flags
from commands.output_files import PendingFiles
from commands.serving import Watch, require_completions, serve_modes
from commands.workload_flags import add_workload_flags, workload_from_args
from config import ConfigError
from goodput import add_request_goodput
from reports import tables
from reports.replicas import replica_lines
from reports.step_page import (PageBudget, page_data, parse_steps_window, render_page,
                               render_side_by_side)
from reports.step_record import StepRecorder, refuse_async_scheduling
from reports.timeline import DRAFTS_LEGEND
from reports.timeline import LEGEND as TIMELINE_LEGEND
from reports.timeline import render_timeline


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "compare", help="the modes side by side on one workload (the default command)",
        description="Serve one workload in each mode and print a table: output tok/s = output "
                    "tokens / duration; TTFT = first token - arrival; TPOT = mean gap after the "
                    "first token; ITL = every gap between tokens; seqs/step = mean batch size; "
                    "padding % = computed tokens that were padding; KV waste % = reserved KV "
                    "slots holding no token, averaged over time; preempted = preemption events; "
                    "goodput req/s = requests meeting every --goodput SLO, per second. Times on "
                    "the virtual clock.")
    flags.add_engine_flags(parser, knobs)
    add_workload_flags(parser)
    group = parser.add_argument_group("output")
    flags.add_mode_flag(group, default=None,
                        default_text=f"{','.join(knobs.compared_modes)}: COMPARED_MODES in "
                                     "code/main.py")
    flags.add_format_flags(group)
    group.add_argument("--draws", type=int, default=draws.DEFAULT_DRAWS, metavar="N",
                       help="with a seeded workload: also serve --seed+1 ... --seed+N-1 in "
                            "CONTINUOUS and CONTINUOUS+CHUNKED and say how many draws each "
                            f"verdict held in (default {draws.DEFAULT_DRAWS}; 1: this draw only)")
    flags.add_chat_goodput_flag(parser)
    flags.add_picture_flags(parser, timeline=True)
    group = parser.add_argument_group("step by step (continuous and chunked modes)")
    group.add_argument("--html", default=None, metavar="FILE",
                       help="write one self-contained HTML page with the continuous modes side by "
                            "side, to step through in a browser (run --html's page for each)")
    group.add_argument("--html-steps", default=None, metavar="A:B",
                       help="put only steps A up to (not including) B of each mode in the page")
    parser.set_defaults(command=run_compare)


def steps_wanted(args: argparse.Namespace, modes, engine):
    """--html: a StepRecorder for each continuous mode (NAIVE and STATIC have no pool to draw)."""
    if not args.html:
        if args.html_steps is not None:
            raise ConfigError("--html-steps chooses the steps of --html's page; give --html FILE")
        return None
    if not any(mode.is_paged for mode in modes):
        raise ConfigError("--html follows vLLM V1's scheduler, which none of these modes is; add "
                          "continuous or chunked to --mode")
    refuse_async_scheduling(modes, engine.config, "--html pages")
    first_step, stop_step = 0, None
    if args.html_steps is not None:
        first_step, stop_step = parse_steps_window(args.html_steps)
    return lambda mode: (StepRecorder(mode, engine.clock, first_step, stop_step,
                                      size_limit=PageBudget()) if mode.is_paged else None)


def run_compare(args: argparse.Namespace, context) -> str:
    draws.DRAWS.check("--draws", args.draws)
    modes = flags.modes_from_args(args, context.knobs.compared_modes,
                                  knob="COMPARED_MODES in code/main.py")
    if args.html and args.async_scheduling is None:
        args.async_scheduling = False  # the page draws the synchronous scheduler, step by step
    engine = flags.engine_from_args(args, context, modes, default_goodput=flags.CHAT_GOODPUT)
    outputs = flags.outputs_from_args(args)
    steps = steps_wanted(args, modes, engine)
    workload = workload_from_args(args, engine.config, engine.modes)
    twin = cluster_flags.aggregated_twin(args, engine)  # --pd: the same GPUs, aggregated
    with PendingFiles(outputs) as files:
        watch = Watch(series=outputs.svg is not None, timeline=outputs.timeline,
                      step_log=files.step_log, steps=steps)
        runs = serve_modes(engine, workload, watch)
        labels = [run.name for run in runs]
        if twin is not None:  # --pd: each mode aggregated on as many GPUs, then disaggregated
            twin_runs = serve_modes(twin, workload, watch)
            runs = [run for pair in zip(twin_runs, runs) for run in pair]
            labels = [f"{run.name} {engines}" for run in twin_runs
                      for engines in cluster_flags.engine_labels(args)]
        require_completions(runs[0].recorder)
        recorders = [(label, run.recorder) for label, run in zip(labels, runs)]
        results = [(label, add_request_goodput(run.recorder.summary(), run.recorder,
                                               engine.slos_ms)) for label, run in zip(labels, runs)]
        if outputs.svg:
            from reports import plots  # only a run that draws needs the charts
            files.add_text(outputs.svg, plots.runs_svg(engine.title_lines(workload), runs,
                                                       engine.plan.num_gpu_blocks))
        if outputs.html:
            title = engine.title_lines(workload)
            files.add_text(outputs.html, render_side_by_side(title, [
                (run.name, render_page(page_data(run.steps, title)),
                 run.steps.num_steps - 1) for run in runs if run.steps]))
        if outputs.format == "json":
            if twin is not None:  # "mode" stays the mode; "engines" says which side
                results = [(run.name, {**metrics, "engines": label[len(run.name) + 1:]})
                           for run, (label, metrics) in zip(runs, results)]
            return tables.to_json(engine.config, engine.plan, workload, results, recorders)
        columns = tables.COLUMNS + [tables.GOODPUT_COLUMN]
        lines = engine.title_lines(workload) + tables.describe_slos(engine.slos_ms,
                                                             flags.goodput_note(args))
        lines += [""] + tables.comparison_table(results, columns)
        lines += tables.speculation_lines(results)
        for name, result in results:
            if result.get("replicas"):
                lines += [f"", f"{name}, per replica:"] + replica_lines(result)[1:]
        lines += tables.rejection_lines(recorders)
        lines += [""] + tables.takeaways(dict(results), engine.config.forward_model,
                                         engine.config.token_budget(True), engine.slos_ms)
        if twin is None and draws.wanted(args, workload, dict(results), engine.slos_ms):
            lines += tables.wrapped([draws.draws_line(draws.serve_draws(args, engine,
                                                                        dict(results)))])
        for label, run in zip(labels, runs):
            if run.timeline:
                lines += [""] + render_timeline(label, run.timeline)
        if outputs.timeline:
            lines += TIMELINE_LEGEND
            if engine.config.speculative_config is not None:
                lines += DRAFTS_LEGEND
        return "\n".join(lines)
