"""The command line: flags named as in vLLM, parsed into an EngineConfig and a Workload.

Engine flags map 1:1 to `EngineConfig` fields (`--max-num-seqs` -> `max_num_seqs`); workload
flags follow `vllm bench serve`. A bad value gets one line on stderr naming it and what would be
valid, and exit status 2; nothing is written before every input has been checked.
"""

import argparse
import json
import math
import os
import sys
from dataclasses import fields

import lesson_check
import report
import views
from commands import calibration
from config import ConfigError, EngineConfig
from forward_model import make_clock
from goodput import parse_goodput
from gpu_memory import plan_memory
from modes import MODES
from presets import GPUS, MODELS
from sweep import SWEEP_GOODPUT, SWEEP_MODES, SWEEP_RATES, parse_loads
from timeline import parse_timeline_spec
from workload import WorkloadError
from views import Outputs, Setup
from workload_flags import add_workload_flags, workload_from_args

DEFAULTS = EngineConfig()
DEFAULT_TIMELINE_STEPS = 16


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2), not a usage dump."""

    def error(self, message: str):
        self.exit(2, f"servesim: error: {message} (see --help)\n")


def build_parser(knobs: dict) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python code/main.py",
        description="servesim: an LLM serving engine's scheduler on a virtual clock. "
                    "Without a command, runs `compare`.")
    commands = parser.add_subparsers(dest="command_name", metavar="command")
    compare = commands.add_parser(
        "compare", help="the modes side by side on one workload (the default command)",
        description="Serve one workload in each mode and print a table: output tok/s = output "
                    "tokens / duration; TTFT = first token - arrival; TPOT = mean gap after the "
                    "first token; ITL = every gap between tokens; seqs/step = mean batch size; "
                    "padding % = computed tokens that were padding; KV waste % = reserved KV "
                    "slots holding no token, averaged over time. Times on the virtual clock.")
    add_engine_flags(compare, knobs)
    add_workload_flags(compare)
    add_output_flags(compare, knobs)
    add_goodput_flag(compare)
    add_picture_flags(compare, timeline=True)
    compare.set_defaults(command=run_compare)
    run = commands.add_parser(
        "run", help="one mode in depth: vllm bench serve's result block, timeline, charts",
        description="Serve one workload in one mode and print the block `vllm bench serve` "
                    "prints (same labels and order), then servesim's own section: engine steps; "
                    "mean batch size = requests per step; preemptions; padding % = computed "
                    "tokens that were padding; KV waste % = reserved KV slots holding no token, "
                    "averaged over time; peak KV use % = most KV slots reserved at once, of the "
                    "pool. Failed requests are those rejected (prompt too long for "
                    "--max-model-len). Peak output token throughput = most tokens in one whole "
                    "second; peak concurrent requests = most requests in flight at once. Times "
                    "on the virtual clock.")
    add_engine_flags(run, knobs)
    add_workload_flags(run)
    add_run_output_flags(run)
    add_goodput_flag(run)
    add_percentile_flags(run)
    add_picture_flags(run, timeline=True)
    run.set_defaults(command=run_one_mode)
    sweep_parser = commands.add_parser(
        "sweep", help="rising load in each mode: the latency-throughput curve",
        description="Serve the same workload at each request rate (or concurrency) in each mode "
                    "and print, per point: output tok/s, P99 TTFT ms, P99 ITL ms and goodput "
                    "req/s (requests meeting every --goodput SLO, per second). Where a mode's "
                    "throughput stops rising it is saturated; its latency then climbs. Times on "
                    "the virtual clock.")
    add_engine_flags(sweep_parser, knobs)
    add_workload_flags(sweep_parser)
    add_sweep_flags(sweep_parser)
    add_picture_flags(sweep_parser, timeline=False)
    sweep_parser.set_defaults(command=run_sweep, request_rate=None)
    presets = commands.add_parser("presets", help="list the GPU and model presets",
                                  description="Every GPU and model preset with derived figures: "
                                              "parameters, weight GiB, KV bytes per token.")
    presets.set_defaults(command=run_presets)
    check = commands.add_parser(
        "lesson-check", help="the lesson's numbers against physics and simulation",
        description="For each number the lesson asks you to remember: the claim, what servesim "
                    "computes or simulates under the lesson's setup (Llama-3.3-70B FP8 on one "
                    "H100 SXM5) and on hardware where it would hold, and a verdict naming the "
                    "limit that decides it (memory capacity, bandwidth floor, compute peak, fixed "
                    "costs).")
    check.set_defaults(command=run_lesson_check)
    calibrate = commands.add_parser(
        "calibration", help="the virtual clock against published measurements",
        description="Replay published measurements of vLLM, NIM and TensorRT-LLM on real GPUs and "
                    "print, per row: the published figure, servesim's under the same model, GPU "
                    "and workload (units in the unit column), ratio = servesim / published and "
                    "|ln ratio|; per group the median and worst |ln ratio| against the goal.")
    calibrate.add_argument("--format", choices=["table", "json"], default="table")
    calibrate.set_defaults(command=run_calibration)
    return parser


def add_engine_flags(parser: argparse.ArgumentParser, knobs: dict) -> None:
    group = parser.add_argument_group("engine (vLLM's flag names)")
    group.add_argument("--model", default=DEFAULTS.model, choices=list(MODELS),
                       help=f"model preset (default {DEFAULTS.model})")
    group.add_argument("--gpu", default=DEFAULTS.gpu, choices=list(GPUS),
                       help=f"GPU preset (default {DEFAULTS.gpu})")
    group.add_argument("--tensor-parallel-size", type=int, default=DEFAULTS.tensor_parallel_size,
                       metavar="N", help="GPUs sharing weights and KV (default 1)")
    group.add_argument("--gpu-memory-utilization", type=float, metavar="F",
                       default=DEFAULTS.gpu_memory_utilization,
                       help="share of GPU memory for weights + activations + KV (default 0.9)")
    group.add_argument("--kv-cache-dtype", default=DEFAULTS.kv_cache_dtype, choices=["auto", "fp8"],
                       help="auto = the model's 16-bit activation dtype")
    group.add_argument("--block-size", type=int, default=knobs["block_size"], metavar="TOKENS",
                       help=f"tokens per KV block (default {knobs['block_size']})")
    group.add_argument("--num-gpu-blocks-override", type=int, default=None, metavar="N",
                       help="use N KV blocks instead of sizing the pool from memory")
    group.add_argument("--max-model-len", type=int, default=DEFAULTS.max_model_len,
                       metavar="TOKENS", help=f"prompt + output cap (default {DEFAULTS.max_model_len})")
    group.add_argument("--max-num-seqs", type=int, default=knobs["max_num_seqs"], metavar="N",
                       help=f"most requests per batch; STATIC's batch size "
                            f"(default {knobs['max_num_seqs']})")
    group.add_argument("--max-num-batched-tokens", type=int, metavar="TOKENS",
                       default=knobs["max_num_batched_tokens"],
                       help="token budget per step (default: 512 with chunked prefill, "
                            "max(max_model_len, 2048) without)")
    group.add_argument("--long-prefill-token-threshold", type=int, metavar="TOKENS",
                       default=DEFAULTS.long_prefill_token_threshold,
                       help="cap on one request's prompt tokens per step (0 = off)")
    group.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                       default=None, help="choose CONTINUOUS+CHUNKED (or, with --no-..., "
                                          "CONTINUOUS) as the continuous mode")
    group.add_argument("--batching-window-ms", type=float, default=DEFAULTS.batching_window_ms,
                       metavar="MS", help="STATIC: longest wait for a full batch (default 10)")
    group.add_argument("--forward-model", default=DEFAULTS.forward_model,
                       choices=["roofline", "linear"],
                       help="roofline: step time from FLOPs and bytes; linear: the lesson toy's")
    group.add_argument("--linear-step-ms", type=float, default=DEFAULTS.linear_step_ms,
                       metavar="MS", help="linear clock: per step (default 0.2)")
    group.add_argument("--linear-prefill-token-ms", type=float, metavar="MS",
                       default=DEFAULTS.linear_prefill_token_ms,
                       help="linear clock: per prompt token (default 0.04)")
    group.add_argument("--linear-decode-token-ms", type=float, metavar="MS",
                       default=DEFAULTS.linear_decode_token_ms,
                       help="linear clock: per decode token (default 0.5)")


def add_output_flags(parser: argparse.ArgumentParser, knobs: dict) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--mode", default=None,
                       help="comma list of naive, static, continuous, chunked, or all "
                            f"(default {','.join(knobs['modes'])})")
    parser.set_defaults(knob_modes=knobs["modes"])
    add_format_flags(group)


def add_format_flags(group) -> None:
    group.add_argument("--format", choices=["table", "json"], default="table")
    group.add_argument("--step-log", default=None, metavar="FILE",
                       help="write one JSON line per engine step to FILE")


def add_run_output_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--mode", default="chunked",
                       help="one of naive, static, continuous, chunked (default chunked)")
    add_format_flags(group)
    group.add_argument("--save-detailed", default=None, metavar="FILE",
                       help="write JSON with per-request lists to FILE, as vllm bench serve "
                            "--save-detailed: input_lens, output_lens, ttfts (s), itls (s, "
                            "one list per request), latencies (s), start_times (s), errors")


def add_goodput_flag(parser: argparse.ArgumentParser, default: str = "none") -> None:
    parser.add_argument_group("goodput (vllm bench serve's flag)").add_argument(
        "--goodput", nargs="+", default=None, metavar="KEY:MS",
        help="SLOs in milliseconds, e.g. ttft:2000 tpot:50 e2el:20000; request goodput (req/s) "
             "= requests meeting every SLO given, per second of the run's duration "
             f"(default {default})")


def add_percentile_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("percentiles (vllm bench serve's flags)")
    group.add_argument("--metric-percentiles", default="99", metavar="P[,P...]",
                       help="percentiles to print for each metric, e.g. 50,90,99 (default 99)")
    group.add_argument("--percentile-metrics", default=",".join(report.PERCENTILE_METRICS),
                       metavar="M[,M...]",
                       help="sections to print, from ttft, tpot, itl, e2el (default all four; "
                            "vLLM leaves out e2el unless asked)")


def add_picture_flags(parser: argparse.ArgumentParser, timeline: bool) -> None:
    """--svg for every command; --timeline and --timeline-at where there are steps to draw."""
    group = parser.add_argument_group("pictures")
    if not timeline:
        group.add_argument("--svg", default=None, metavar="PATH",
                           help="write charts to PATH as one self-contained SVG file: output "
                                "tok/s, P99 TTFT (s), P99 ITL (ms) and goodput (req/s) against "
                                "the load, one line per mode")
        return
    group.add_argument("--svg", default=None, metavar="PATH",
                       help="write charts to PATH as one self-contained SVG file: per mode, "
                            "ITL (ms), KV blocks held and requests running and waiting over "
                            "virtual time (s); and the TTFT CDF (s) of every mode")
    group.add_argument("--timeline", type=int, nargs="?", const=DEFAULT_TIMELINE_STEPS,
                       default=None, metavar="N",
                       help="draw N engine steps as text, one row per step, one cell per "
                            f"request (default N {DEFAULT_TIMELINE_STEPS})")
    group.add_argument("--timeline-at", default=None, metavar="WHERE",
                       help="which steps (implies --timeline): start (the first N, the "
                            "default), worst-itl (around the step that ended the longest "
                            "inter-token gap) or request:ID (around that request's first step)")


def add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sweep")
    group.add_argument("--mode", default=",".join(SWEEP_MODES),
                       help="comma list of naive, static, continuous, chunked, or all "
                            f"(default {','.join(SWEEP_MODES)})")
    group.add_argument("--request-rates", default=None, metavar="R[,R...]",
                       help="request rates to sweep, req/s, e.g. 1,2,4,8 (default "
                            f"{','.join(map(str, SWEEP_RATES))}); inf sends all at once")
    group.add_argument("--concurrencies", default=None, metavar="N[,N...]",
                       help="sweep --max-concurrency instead, e.g. 1,8,32 (all requests "
                            "ready at once unless --request-rate is given)")
    group.add_argument("--format", choices=["table", "json"], default="table")
    add_goodput_flag(parser, default=" ".join(SWEEP_GOODPUT))


# -- from flags to objects ---------------------------------------------------------------------

def config_from_args(args: argparse.Namespace) -> EngineConfig:
    config = EngineConfig(**{f.name: getattr(args, f.name) for f in fields(EngineConfig)})
    config.validate()
    return config


def modes_from_args(args: argparse.Namespace) -> list:
    explicit = args.mode is not None
    text = args.mode if explicit else ",".join(args.knob_modes)
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        names = list(MODES)
    unknown = [n for n in names if n not in MODES]
    if unknown or not names:
        raise ConfigError(f"unknown --mode {','.join(unknown) or text!r}; "
                          f"choose from {', '.join(MODES)} or all")
    if args.enable_chunked_prefill is not None:
        names = _apply_chunked_prefill_flag(names, args.enable_chunked_prefill, explicit)
    return [MODES[n] for n in dict.fromkeys(names)]


def _apply_chunked_prefill_flag(names: list[str], enabled: bool, explicit: bool) -> list[str]:
    """--[no-]enable-chunked-prefill picks which continuous mode runs, as in `vllm serve`."""
    wanted, unwanted = ("chunked", "continuous") if enabled else ("continuous", "chunked")
    flag = "--enable-chunked-prefill" if enabled else "--no-enable-chunked-prefill"
    if explicit and unwanted in names:
        raise ConfigError(f"{flag} contradicts --mode {','.join(names)}; drop one of them")
    if wanted not in names and unwanted not in names:
        raise ConfigError(f"{flag} needs continuous or chunked in --mode")
    return [wanted if n == unwanted else n for n in names]


# -- commands: flags to objects, then views.py serves and shows ----------------------------------

def prepare(args: argparse.Namespace, modes: list, default_goodput=()) -> Setup:
    config = config_from_args(args)
    for mode in modes:
        mode.check(config)
    slos_ms = parse_goodput(args.goodput or list(default_goodput))
    return Setup(config, modes, plan_memory(config), make_clock(config), slos_ms)


def outputs_from_args(args: argparse.Namespace) -> Outputs:
    """What to show and write; every choice checked here, before anything runs. (A flag the
    command does not have counts as not given: sweep has no --timeline, for instance.)"""
    outputs = Outputs(format=args.format, svg=args.svg,
                      step_log=getattr(args, "step_log", None),
                      save_detailed=getattr(args, "save_detailed", None))
    if getattr(args, "timeline", None) is not None or getattr(args, "timeline_at", None):
        if args.format == "json":
            raise ConfigError("--timeline draws text; leave it out with --format json")
        num_steps = DEFAULT_TIMELINE_STEPS if args.timeline is None else args.timeline
        outputs.timeline = parse_timeline_spec(num_steps, args.timeline_at or "start")
    if hasattr(args, "metric_percentiles"):
        outputs.percentiles = report.parse_percentiles(args.metric_percentiles)
        outputs.percentile_metrics = report.parse_percentile_metrics(args.percentile_metrics)
    return outputs


def run_compare(args: argparse.Namespace, simulate) -> int:
    setup = prepare(args, modes_from_args(args))
    workload = workload_from_args(args, setup.config)
    print(views.compare_modes(setup, workload, outputs_from_args(args), simulate))
    return 0


def run_one_mode(args: argparse.Namespace, simulate) -> int:
    modes = modes_from_args(args)
    if len(modes) != 1:
        raise ConfigError(f"run takes one --mode (naive, static, continuous or chunked), "
                          f"got {args.mode!r}; use compare for several")
    setup = prepare(args, modes)
    workload = workload_from_args(args, setup.config)
    print(views.run_in_depth(setup, workload, outputs_from_args(args), simulate))
    return 0


def run_sweep(args: argparse.Namespace, simulate) -> int:
    setup = prepare(args, modes_from_args(args), default_goodput=SWEEP_GOODPUT)
    load_name, workloads = sweep_workloads_from_args(args, setup.config)
    print(views.sweep_loads(setup, load_name, workloads, outputs_from_args(args), simulate))
    return 0


def sweep_workloads_from_args(args: argparse.Namespace,
                              config: EngineConfig) -> tuple[str, list]:
    """(the load swept, [(value, workload)]): one workload per point, all built (and so
    checked) before the first simulation."""
    if args.request_rates is not None and args.concurrencies is not None:
        raise ConfigError("give --request-rates or --concurrencies, not both")
    if args.concurrencies is not None:
        if args.max_concurrency is not None:
            raise ConfigError("--max-concurrency conflicts with --concurrencies, which sets it "
                              "for each point")
        loads = parse_loads("--concurrencies", args.concurrencies, integer=True)
        rate = math.inf if args.request_rate is None else args.request_rate
        return "max_concurrency", [
            (n, workload_from_args(_with(args, request_rate=rate, max_concurrency=int(n)), config))
            for n in loads]
    if args.request_rate is not None:
        raise ConfigError("--request-rate conflicts with --request-rates, which sets it for "
                          "each point")
    text = args.request_rates or ",".join(map(str, SWEEP_RATES))
    loads = parse_loads("--request-rates", text, integer=False)
    return "request_rate", [(r, workload_from_args(_with(args, request_rate=r), config))
                            for r in loads]


def _with(args: argparse.Namespace, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def run_presets(args: argparse.Namespace, simulate) -> int:
    print("\n".join(report.presets_tables()))
    return 0


def run_lesson_check(args: argparse.Namespace, simulate) -> int:
    checker = lesson_check.LessonCheck(simulate)
    print("\n".join(lesson_check.report_lines(checker.checks())))
    return 0


def run_calibration(args: argparse.Namespace, simulate) -> int:
    results = [(group, calibration.compare_group(group, simulate)) for group in calibration.GROUPS]
    if args.format == "json":
        print(json.dumps(calibration.to_json(results), indent=2))
    else:
        print("\n".join(calibration.report_lines(results)))
    return 0


def main(argv: list[str], knobs: dict, simulate) -> int:
    parser = build_parser(knobs)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["compare", *argv]
    args = parser.parse_args(argv)
    if args.command_name is None:
        parser.print_help()
        return 0
    try:
        return args.command(args, simulate)
    except (ConfigError, WorkloadError) as error:
        print(f"servesim: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 0
