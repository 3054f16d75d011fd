"""`run`: one mode in depth, as `vllm bench serve` would report it, plus what the scheduler did.

Prints vLLM's "Serving Benchmark Result" block (reports/serving_block.py), or the JSON; can draw a
timeline and charts, and write vLLM's per-request lists (`--save-detailed`, detailed.py).
"""

import argparse

from commands import flags
from commands.detailed import detailed_lists
from commands.output_files import PendingFiles
from commands.serving import Watch, require_completions, serve_modes
from commands.workload_flags import add_workload_flags, workload_from_args
from config import ConfigError
from metrics import serving_metrics
from reports import tables
from reports.block_table import render_block_table
from reports.replicas import replica_lines
from reports.serving_block import serving_result_block
from reports.step_page import (PageBudget, explain_lines, page_data, parse_steps_window,
                               render_page, step_header)
from reports.step_record import StepRecorder, refuse_async_scheduling
from reports.timeline import DRAFTS_LEGEND
from reports.timeline import LEGEND as TIMELINE_LEGEND
from reports.timeline import render_timeline


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "run", help="one mode in depth: vllm bench serve's result block, timeline, charts",
        description="Serve one workload in one mode and print the block `vllm bench serve` "
                    "prints (same labels and order), then servesim's own section: engine steps; "
                    "mean batch size = requests per step; preemptions = preemption events; "
                    "prefill tokens computed = tokens computed that were not decodes (prompts "
                    "less their prefix cache hits, recomputation after preemption, STATIC's "
                    "prompt padding); padding % = computed tokens that were padding; KV waste % = reserved KV "
                    "slots holding no token, averaged over time; peak KV use % = most KV slots "
                    "reserved at once, of the pool; with prefix caching, vLLM's counters: queries = "
                    "prompt tokens of new requests looked up, hits = those found cached, hit rate "
                    "= hits / queries, and apart, what requests resumed after preemption found "
                    "again (tokens). Failed requests are those rejected (prompt "
                    "too long for --max-model-len). Peak output token throughput = most tokens "
                    "in one whole second; peak concurrent requests = most requests in flight at "
                    "once. Times on the virtual clock.")
    flags.add_engine_flags(parser, knobs)
    add_workload_flags(parser)
    group = parser.add_argument_group("output")
    flags.add_mode_flag(group, default=None, default_text="chunked; continuous with "
                        "--no-enable-chunked-prefill", one=True)
    flags.add_format_flags(group)
    group.add_argument("--save-detailed", default=None, metavar="FILE",
                       help="write JSON with per-request lists to FILE, as vllm bench serve "
                            "--save-detailed: input_lens, output_lens, ttfts (s), itls (s, "
                            "one list per request), latencies (s), start_times (s), errors")
    flags.add_goodput_flag(parser)
    flags.add_percentile_flags(parser)
    flags.add_picture_flags(parser, timeline=True)
    parser.add_argument_group("pictures").add_argument(
        "--block-table", default=None, metavar="ID",
        help="draw request ID's block table step by step (logical block -> physical block id, "
             "as it takes and returns them), and the first request that is handed one of its "
             "blocks again; continuous or chunked mode only")
    add_step_flags(parser)
    parser.set_defaults(command=run_one_mode)


def add_step_flags(parser) -> None:
    """--html and --explain: every step, with the rule behind each decision (continuous modes)."""
    group = parser.add_argument_group("step by step (continuous and chunked modes)")
    group.add_argument("--html", default=None, metavar="FILE",
                       help="write the run as one self-contained HTML page to step through in a "
                            "browser: RUNNING and WAITING, the token budget, the block pool, "
                            "every decision with its rule (no network needed)")
    group.add_argument("--html-steps", default=None, metavar="A:B",
                       help="put only steps A up to (not including) B in the page (for runs "
                            "too long for one page; A: runs to the end)")
    group.add_argument("--explain", default=None, type=int, metavar="STEP",
                       help="print why each request did what it did in engine step STEP "
                            "(counted from 0, as in --step-log), naming vLLM's function")
    group.add_argument("--explain-request", default=None, metavar="ID",
                       help="print request ID's decision in every step it was in")


def run_one_mode(args: argparse.Namespace, context) -> str:
    modes = flags.modes_from_args(args, ["chunked"])
    if len(modes) != 1:
        raise ConfigError(f"run takes one --mode (naive, static, continuous or chunked), "
                          f"got {args.mode!r}; use compare for several")
    if (args.html or args.explain is not None or args.explain_request is not None) and (
            args.async_scheduling is None):
        args.async_scheduling = False  # the page draws the synchronous scheduler, step by step
    engine = flags.engine_from_args(args, context, modes)
    outputs = flags.outputs_from_args(args)
    if outputs.block_table is not None and not modes[0].is_paged:
        raise ConfigError(f"--block-table draws PagedAttention's block tables, and {modes[0].name} "
                          "has none (it reserves max_model_len slots per request in one piece); "
                          "use --mode continuous or chunked")
    steps = steps_wanted(args, modes[0], engine)
    workload = workload_from_args(args, engine.config, engine.modes)
    with PendingFiles(outputs) as files:
        watch = Watch(series=outputs.svg is not None, tokens_per_s=True, timeline=outputs.timeline, step_log=files.step_log,
                      token_times=outputs.save_detailed is not None,
                      block_table=outputs.block_table, steps=steps)
        [mode_run] = serve_modes(engine, workload, watch)
        name, recorder = mode_run.name, mode_run.recorder
        require_completions(recorder)
        if outputs.html:
            files.add_text(outputs.html, render_page(page_data(
                mode_run.steps, engine.title_lines(workload))))
        first_arrival_s = min(r.arrival_s for r in recorder.iter_completed())
        metrics = serving_metrics(recorder, outputs.percentiles, engine.slos_ms,
                                  mode_run.tokens_per_s.peak(first_arrival_s))
        if outputs.svg:
            from reports import plots  # only a run that draws needs the charts
            files.add_text(outputs.svg, plots.runs_svg(engine.title_lines(workload), [mode_run],
                                                       engine.plan.num_gpu_blocks))
        if outputs.save_detailed:
            detailed = {**metrics, **detailed_lists(recorder, mode_run.token_times)}
            files.add_text(outputs.save_detailed, tables.to_json(
                engine.config, engine.plan, workload, [(name, detailed)], [(name, recorder)],
                indent=None) + "\n")
        if outputs.format == "json":
            return tables.to_json(engine.config, engine.plan, workload, [(name, metrics)],
                                  [(name, recorder)])
        mode = modes[0]
        lines = engine.title_lines(workload) + tables.describe_slos(engine.slos_ms)
        lines += [f"mode: {mode.name} ({mode.summary})", ""]
        lines += serving_result_block(metrics, outputs.percentiles, outputs.percentile_metrics,
                                      workload.params)
        lines += replica_lines(metrics)
        lines += tables.rejection_lines([(name, recorder)])
        if mode_run.timeline:
            lines += [""] + render_timeline(name, mode_run.timeline) + TIMELINE_LEGEND
            if engine.config.speculative_config is not None:
                lines += DRAFTS_LEGEND
        if mode_run.block_table:
            lines += [""] + render_block_table(name, mode_run.block_table,
                                               engine.plan.num_gpu_blocks)
        lines += explanation_lines(args, mode_run.steps)
        return "\n".join(lines)


def steps_wanted(args: argparse.Namespace, mode, engine):
    """What --html and --explain ask to record: a StepRecorder maker, or None."""
    explaining = args.explain is not None or args.explain_request is not None
    if not (args.html or explaining):
        if args.html_steps is not None:
            raise ConfigError("--html-steps chooses the steps of --html's page; give --html FILE")
        return None
    if not mode.is_paged:
        raise ConfigError(f"--html and --explain follow vLLM V1's scheduler, and {mode.name} is "
                          "not it; use --mode continuous or chunked")
    refuse_async_scheduling([mode], engine.config, "--html and --explain")
    if explaining and args.format == "json":
        raise ConfigError("--explain prints text; leave it out with --format json")
    if args.explain is not None and args.explain < 0:
        raise ConfigError(f"--explain {args.explain}: steps count from 0; give a step number")
    first_step, stop_step = 0, None
    if args.html_steps is not None:
        first_step, stop_step = parse_steps_window(args.html_steps)
    elif not args.html and args.explain is not None and args.explain_request is None:
        first_step, stop_step = args.explain, args.explain + 1  # keep that step only
    budget = PageBudget() if args.html else None
    return lambda watched: StepRecorder(watched, engine.clock, first_step, stop_step,
                                        size_limit=budget, keep_queues=explaining)


def explanation_lines(args: argparse.Namespace, recorder) -> list[str]:
    """--explain STEP and --explain-request ID, as text."""
    if recorder is None or (args.explain is None and args.explain_request is None):
        return []
    records = {record.index: record for record in recorder.records}
    lines = []
    if args.explain is not None:
        record = records.get(args.explain)
        if record is None:
            raise ConfigError(f"--explain {args.explain}: the run has {recorder.num_steps} steps "
                              f"(0 to {recorder.num_steps - 1})"
                              + ("" if args.html_steps is None else
                                 f" and --html-steps {args.html_steps} keeps fewer"))
        lines += ["", f"Every decision in step {record.index} (vLLM 0.30.0's function in "
                  "brackets):", step_header(record)] + explain_lines(record)
    if args.explain_request is not None:
        request_id = args.explain_request
        if request_id not in recorder.requests:
            raise ConfigError(f"--explain-request {request_id}: no request of that id ran in the "
                              f"recorded steps; ids are {', '.join(list(recorder.requests)[:3])}, "
                              "...")
        lines += ["", f"Request {request_id}, step by step (vLLM 0.30.0's function in brackets):"]
        for record in recorder.records:
            for line in explain_lines(record, request_id):
                lines.append(f"step {record.index:>5}" + line[len(f"  request {request_id}"):])
    return lines
