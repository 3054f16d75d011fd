"""The command line: flags named as in vLLM, parsed into an EngineConfig and a Workload.

Engine flags map 1:1 to `EngineConfig` fields (`--max-num-seqs` -> `max_num_seqs`); workload
flags follow `vllm bench serve`. A bad value gets one line on stderr naming it and what would be
valid, and exit status 2; nothing is written before every input has been checked.
"""

import argparse
import sys
from dataclasses import fields

import lesson_check
import report
from config import ConfigError, EngineConfig
from forward_model import make_clock
from gpu_memory import lookup, plan_memory
from modes import MODES
from presets import GPUS, MODELS
from step_log import StepLog
from workload import WorkloadError
from workload_flags import add_workload_flags, workload_from_args

DEFAULTS = EngineConfig()


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
    compare.set_defaults(command=run_compare)
    presets = commands.add_parser("presets", help="list the GPU and model presets",
                                  description="Every GPU and model preset with derived figures: "
                                              "parameters, weight GiB, KV bytes per token.")
    presets.set_defaults(command=run_presets)
    check = commands.add_parser(
        "lesson-check", help="the lesson's numbers against physics and simulation",
        description="For each number the lesson asks you to remember: the claim, what servesim "
                    "computes or simulates under the lesson's setup (Llama-3.3-70B FP8 on one "
                    "H100 SXM5) and on hardware where it would hold, and a verdict naming the "
                    "limit that decides it (memory capacity, bandwidth floor, compute peak).")
    check.set_defaults(command=run_lesson_check)
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
    group.add_argument("--format", choices=["table", "json"], default="table")
    group.add_argument("--step-log", default=None, metavar="FILE",
                       help="write one JSON line per engine step to FILE")


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


# -- commands ------------------------------------------------------------------------------------

def run_compare(args: argparse.Namespace, simulate) -> int:
    config = config_from_args(args)
    modes = modes_from_args(args)
    for mode in modes:
        mode.check(config)
    plan = plan_memory(config)
    clock = make_clock(config)
    workload = workload_from_args(args, config)
    step_log = StepLog(args.step_log) if args.step_log else None
    try:
        recorders = []
        for mode in modes:
            observers = [step_log.observer(mode.name)] if step_log else []
            recorders.append((mode.name, simulate(workload, mode, config, plan.num_gpu_blocks,
                                                  clock, observers)))
    except BaseException:
        if step_log:
            step_log.discard()
        raise
    if step_log:
        step_log.commit()
    results = [(name, recorder.summary()) for name, recorder in recorders]
    if args.format == "json":
        print(report.to_json(config, plan, workload, results, recorders))
        return 0
    model, gpu = lookup(config)
    lines = report.header_lines(config, plan, model.name, gpu.name, workload)
    lines += [""] + report.comparison_table(results)
    lines += report.rejection_lines(recorders)
    lines += [""] + report.takeaways(dict(results), config.forward_model)
    print("\n".join(lines))
    return 0


def run_presets(args: argparse.Namespace, simulate) -> int:
    print("\n".join(report.presets_tables()))
    return 0


def run_lesson_check(args: argparse.Namespace, simulate) -> int:
    checker = lesson_check.LessonCheck(simulate)
    print("\n".join(lesson_check.report_lines(checker.checks())))
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
