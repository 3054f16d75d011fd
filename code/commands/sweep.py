"""`sweep`: the same workload at rising load, in each mode: the latency-throughput curve.

How a serving engineer reads a scheduler: offer more and more load and watch two numbers.

    load low     every mode keeps up: output tok/s = load x mean output length, latency = work
    load rises   throughput rises with it ... until the engine saturates
    saturated    throughput goes flat; the extra requests queue, so TTFT climbs with the run

STATIC saturates first: each batch pads every prompt to the longest and decodes until its longest
output is done, and its contiguous KV reservations cap the batch. CONTINUOUS and
CONTINUOUS+CHUNKED saturate later, at about the same throughput; what chunking buys is the tail:
P99 ITL stays at a chunk's step time instead of a whole long prompt's.

Defaults, and why: the compare workload (80 mixed requests, 10% of them 6-8k-token documents)
at 1, 2, 4, 8 and 16 req/s. 1 req/s is light for continuous batching on the default H200 but
already too much for STATIC; by 16 req/s every mode is saturated, so each curve shows its knee.
Goodput counts requests with TTFT <= 2 s and TPOT <= 100 ms, the interactive chat that `compare`
judges by too (goodput.CHAT_SLOS_MS says why). Goodput rises with the load, peaks, and collapses
once the queue pushes TTFT past its target.

Every point is a fresh run of the same requests (same seed) at another arrival rate or
concurrency. The table and its JSON are in reports/sweep_table.py, the charts in reports/plots.py.

`--max-num-batched-tokens 256,512,...` sweeps the token budget instead, at one load, in
CONTINUOUS+CHUNKED (exercise 2): a step's budget bounds the KV blocks it can fill and how long it
takes, so the rows show where the free blocks, not the budget, limit a step, and where a larger
budget stops buying throughput and only stretches ITL (reports/sweep_table.budget_rule_lines).
"""

import argparse
import math

from commands import flags
from commands.output_files import PendingFiles
from commands.serving import Engine, require_completions
from commands.workload_flags import add_workload_flags, workload_from_args
from config import ConfigError
from goodput import add_request_goodput
from kv_cache import num_blocks_for
from reports import tables
from reports.sweep_table import (SweepPoint, budget_rule_lines, load_phrase, saturation_lines,
                                 sweep_json, sweep_line, sweep_table)

SWEEP_MODES = ("static", "continuous", "chunked")
BUDGET_SWEEP_MODES = ("chunked",)  # the budget slices prompts only with chunked prefill on;
#                                    without it vLLM refuses a budget below max_model_len
SWEEP_RATES = (1, 2, 4, 8, 16)


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "sweep", help="rising load in each mode: the latency-throughput curve",
        description="Serve the same workload at each request rate (or concurrency, or token "
                    "budget) in each mode and print, per point: output tok/s, P99 TTFT ms, P99 "
                    "ITL ms, goodput req/s (requests meeting every --goodput SLO, per second) and "
                    "preemption events; a budget sweep adds blocks/step (the KV blocks one "
                    "step's budget can fill: budget / block size) and fewest free (the fewest "
                    "free KV blocks during the run). Where a mode's throughput stops rising it is "
                    "saturated; its latency then climbs. Times on the virtual clock.")
    flags.add_engine_flags(parser, knobs, budget_list=True)
    add_workload_flags(parser)
    group = parser.add_argument_group("sweep")
    flags.add_mode_flag(group, default=None, default_text=",".join(SWEEP_MODES))
    group.add_argument("--request-rates", default=None, metavar="R[,R...]",
                       help="request rates to sweep, req/s, e.g. 1,2,4,8 (default "
                            f"{','.join(map(str, SWEEP_RATES))}); inf sends all at once")
    group.add_argument("--concurrencies", default=None, metavar="N[,N...]",
                       help="sweep --max-concurrency instead, e.g. 1,8,32 (all requests "
                            "ready at once unless --request-rate is given; a --trace keeps its "
                            "own times, and sweeps only this)")
    flags.add_format_flags(group, step_log=False)
    flags.add_chat_goodput_flag(parser)
    flags.add_picture_flags(parser, timeline=False)
    parser.set_defaults(command=run_sweep)


def run_sweep(args: argparse.Namespace, context) -> str:
    budgets = parse_budgets(args)
    if len(budgets) > 1:
        modes = flags.modes_from_args(args, BUDGET_SWEEP_MODES)
    else:
        modes = flags.modes_from_args(args, SWEEP_MODES)
    outputs = flags.outputs_from_args(args)
    load_name, specs = sweep_points_from_args(args, context, modes, budgets)
    with PendingFiles(outputs) as files:
        points = run_points(modes, specs, load_name)
        _, engine, first_workload = specs[0]
        title, _, workload_line, *speculation = engine.title_lines(first_workload)
        load_lines = [sweep_line(points)] + tables.describe_slos(engine.slos_ms,
                                                                 flags.goodput_note(args))
        header = [title, workload_line, *speculation] + load_lines
        if outputs.svg:
            from reports import plots  # only a run that draws needs the charts
            files.add_text(outputs.svg, plots.sweep_svg(header, points))
        if outputs.format == "json":
            return sweep_json(engine.config, engine.plan, first_workload.params, engine.slos_ms,
                              points)
        lines = engine.title_lines(first_workload) + load_lines
        lines += [""] + sweep_table(points)
        if load_name == "max_num_batched_tokens":
            lines += [""] + budget_rule_lines(points, engine.config.block_size)
        else:
            lines += [""] + saturation_lines(points)
        return "\n".join(lines + top_load_surprises(points))


def parse_budgets(args: argparse.Namespace) -> list[int]:
    """--max-num-batched-tokens as a list (empty when not given); one value is just the knob."""
    if args.max_num_batched_tokens is None:
        return []
    return [int(b) for b in flags.parse_loads("--max-num-batched-tokens",
                                              args.max_num_batched_tokens, integer=True)]


def sweep_points_from_args(args: argparse.Namespace, context, modes: list,
                           budgets: list[int]) -> tuple[str, list]:
    """(the load swept, [(value, engine, workload)]): every point's engine and workload built,
    and so checked, before the first simulation."""
    if len(budgets) > 1:
        without = [mode.name for mode in modes if not mode.has_token_budget]
        if without:
            raise ConfigError(f"--max-num-batched-tokens {args.max_num_batched_tokens} sweeps "
                              f"the token budget, which {' and '.join(without)} "
                              f"{'does' if len(without) == 1 else 'do'} not have (a "
                              "padded batch computes every member's tokens); choose --mode "
                              "continuous, chunked or both")
        if args.request_rates is not None or args.concurrencies is not None:
            raise ConfigError("sweep one thing at a time: a list of --max-num-batched-tokens "
                              "runs at one load (--request-rate or --max-concurrency), so drop "
                              "--request-rates and --concurrencies")
        engines = [engine_for(args, context, modes, budget) for budget in budgets]
        workload = workload_from_args(args, engines[0].config, modes)
        return "max_num_batched_tokens", [(b, e, workload) for b, e in zip(budgets, engines)]
    engine = engine_for(args, context, modes, budgets[0] if budgets else None)
    load_name, workloads = sweep_workloads_from_args(args, engine.config, modes)
    return load_name, [(load, engine, workload) for load, workload in workloads]


def engine_for(args: argparse.Namespace, context, modes: list, budget) -> Engine:
    return flags.engine_from_args(_with(args, max_num_batched_tokens=budget), context, modes,
                                  default_goodput=flags.CHAT_GOODPUT)


def top_load_surprises(points: list[SweepPoint]) -> list[str]:
    """What looks wrong next to the lesson at the highest load, explained (reports/tables.py)."""
    top = points[-1].load
    results = {point.mode_name: point.metrics for point in points if point.load == top}
    return tables.wrapped([f"- At {load_phrase(points[-1])}: {line[2:]}"
                           for line in tables.surprise_lines(results)])


def sweep_workloads_from_args(args: argparse.Namespace, config, modes: list) -> tuple[str, list]:
    """(the load swept, [(value, workload)]): one workload per point, all built (and so
    checked) before the first simulation."""
    if args.request_rates is not None and args.concurrencies is not None:
        raise ConfigError("give --request-rates or --concurrencies, not both")
    if args.concurrencies is not None:
        if args.max_concurrency is not None:
            raise ConfigError("--max-concurrency conflicts with --concurrencies, which sets it "
                              "for each point")
        loads = flags.parse_loads("--concurrencies", args.concurrencies, integer=True)
        rate = args.request_rate
        if rate is None and args.trace is None:  # a trace keeps its own arrival times
            rate = math.inf
        return "max_concurrency", [
            (n, workload_from_args(_with(args, request_rate=rate, max_concurrency=int(n)), config,
                                   modes))
            for n in loads]
    if args.trace is not None:
        raise ConfigError("sweep --trace varies --concurrencies (e.g. 1,8,32): a trace brings "
                          "its own arrival times, so there is no request rate to sweep")
    if args.request_rate is not None:
        raise ConfigError("--request-rate conflicts with --request-rates, which sets it for "
                          "each point")
    text = args.request_rates or ",".join(map(str, SWEEP_RATES))
    loads = flags.parse_loads("--request-rates", text, integer=False)
    return "request_rate", [(r, workload_from_args(_with(args, request_rate=r), config, modes))
                            for r in loads]


def _with(args: argparse.Namespace, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def run_points(modes: list, specs: list, load_name: str) -> list[SweepPoint]:
    """Serve every (load, engine, workload) in every mode; points in mode order, then load
    order."""
    points = []
    for mode in modes:
        for load, engine, workload in specs:
            label = f"point {len(points) + 1}/{len(modes) * len(specs)} ({load_name} {load:g}), "
            recorder = engine.serve(workload, mode, label=label + mode.name)
            require_completions(recorder)
            metrics = add_request_goodput(recorder.summary(), recorder, engine.slos_ms)
            if mode.is_paged:  # what the pool had left at its fullest (the budget rule's input)
                block_size = engine.config.block_size
                metrics["num_gpu_blocks"] = engine.plan.num_gpu_blocks  # this point's pool
                metrics["min_free_blocks"] = (engine.plan.num_gpu_blocks
                                              - recorder.counters.peak_reserved_slots // block_size)
                if load_name == "max_num_batched_tokens":
                    metrics["budget_blocks"] = num_blocks_for(int(load), block_size)
            points.append(SweepPoint(mode.name, load_name, load, metrics))
    return points
