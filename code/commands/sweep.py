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
Goodput counts requests with TTFT <= 3 s and TPOT <= 50 ms: an interactive chat target, whose
per-token bound is the lesson's P99 ITL without chunked prefill (~50 ms). Goodput rises with the
load, peaks, and collapses once the queue pushes TTFT past its target.

Every point is a fresh run of the same requests (same seed) at another arrival rate or
concurrency. The table and its JSON are in reports/sweep_table.py, the charts in reports/plots.py.
"""

import argparse
import math

from commands import flags
from commands.output_files import PendingFiles
from commands.serving import Engine, require_completions
from commands.workload_flags import add_workload_flags, workload_from_args
from config import ConfigError
from goodput import add_request_goodput, describe_slos
from reports.sweep_table import (SweepPoint, saturation_lines, sweep_json, sweep_line,
                                 sweep_table)

SWEEP_MODES = ("static", "continuous", "chunked")
SWEEP_RATES = (1, 2, 4, 8, 16)
SWEEP_GOODPUT = ("ttft:3000", "tpot:50")


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "sweep", help="rising load in each mode: the latency-throughput curve",
        description="Serve the same workload at each request rate (or concurrency) in each mode "
                    "and print, per point: output tok/s, P99 TTFT ms, P99 ITL ms and goodput "
                    "req/s (requests meeting every --goodput SLO, per second). Where a mode's "
                    "throughput stops rising it is saturated; its latency then climbs. Times on "
                    "the virtual clock.")
    flags.add_engine_flags(parser, knobs)
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
    flags.add_goodput_flag(parser, default=" ".join(SWEEP_GOODPUT))
    flags.add_picture_flags(parser, timeline=False)
    parser.set_defaults(command=run_sweep)


def run_sweep(args: argparse.Namespace, context) -> str:
    modes = flags.modes_from_args(args, SWEEP_MODES)
    engine = flags.engine_from_args(args, context, modes, default_goodput=SWEEP_GOODPUT)
    outputs = flags.outputs_from_args(args)
    load_name, workloads = sweep_workloads_from_args(args, engine.config)
    with PendingFiles(outputs) as files:
        points = run_points(engine, workloads, load_name)
        first_workload = workloads[0][1]
        title, _, workload_line = engine.title_lines(first_workload)
        header = [title, workload_line, sweep_line(points)] + describe_slos(engine.slos_ms)
        if outputs.svg:
            from reports import plots  # only a run that draws needs the charts
            files.add_text(outputs.svg, plots.sweep_svg(header, points))
        if outputs.format == "json":
            return sweep_json(engine.config, engine.plan, first_workload.params, engine.slos_ms,
                              points)
        lines = engine.title_lines(first_workload) + header[2:]
        lines += [""] + sweep_table(points)
        return "\n".join(lines + [""] + saturation_lines(points))


def sweep_workloads_from_args(args: argparse.Namespace, config) -> tuple[str, list]:
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
            (n, workload_from_args(_with(args, request_rate=rate, max_concurrency=int(n)), config))
            for n in loads]
    if args.trace is not None:
        raise ConfigError("sweep --trace varies --concurrencies (e.g. 1,8,32): a trace brings "
                          "its own arrival times, so there is no request rate to sweep")
    if args.request_rate is not None:
        raise ConfigError("--request-rate conflicts with --request-rates, which sets it for "
                          "each point")
    text = args.request_rates or ",".join(map(str, SWEEP_RATES))
    loads = flags.parse_loads("--request-rates", text, integer=False)
    return "request_rate", [(r, workload_from_args(_with(args, request_rate=r), config))
                            for r in loads]


def _with(args: argparse.Namespace, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def run_points(engine: Engine, workloads: list, load_name: str) -> list[SweepPoint]:
    """Serve every (load, workload) in every mode; points in mode order, then load order."""
    points = []
    for mode in engine.modes:
        for load, workload in workloads:
            recorder = engine.serve(workload, mode)
            require_completions(recorder)
            metrics = add_request_goodput(recorder.summary(), recorder, engine.slos_ms)
            points.append(SweepPoint(mode.name, load_name, load, metrics))
    return points
