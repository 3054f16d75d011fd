"""The workload's command-line options, named as `vllm bench serve` names them, and the Workload
they build.

    (no option)              the lesson's mixed traffic at 4 req/s
    --dataset-name random    vLLM's random dataset: --random-input-len, --random-output-len, ...
    --dataset-name normal    normal lengths: --input-mean, --input-std, --output-mean, ...
    --dataset-name prefix_repetition   shared prefixes: --prefix-repetition-prefix-len, ...
    --trace FILE             a real service's requests at their own times

`--num-prompts` and `--max-concurrency` apply to all of them. An option that belongs to another
workload than the one chosen (`--random-input-len` with the mixed default, `--request-rate` with
a trace) is refused with one line rather than silently ignored: a learner who typed it expects it
to change something.
"""

import argparse
import math
import sys

from commands import estimate
from config import EngineConfig
from forward_model import make_clock
from traces.formats import DEFAULT_HASH_BLOCK_SIZE, TRACE_FORMATS
from traces.replay import trace_workload
from traces.shipped import shipped_traces
from workload import (DEFAULT_NUM_PROMPTS, MIXED_REQUEST_RATE, NormalLengths,
                      RandomLengths, Workload, WorkloadError, mixed_workload, normal_workload,
                      prefix_repetition_workload, random_workload)

SYNTHETIC = ("mixed", "random", "normal", "prefix_repetition")
PREFIX_REPETITION = {"prefix_len": 256, "suffix_len": 256, "num_prefixes": 10,
                     "output_len": 128}  # vllm bench serve's defaults
CLOCK_RESOLUTION_MARGIN = 1000  # the cheapest step, in units of the clock's resolution at the end
RANDOM = RandomLengths()
NORMAL = NormalLengths()

# Which workloads each option means something for (they all default to None: "not given").
OPTION_WORKLOADS = {
    "request_rate": SYNTHETIC,
    "burstiness": SYNTHETIC,
    "random_input_len": ("random",),
    "random_output_len": ("random",),
    "random_range_ratio": ("random",),
    "random_prefix_len": ("random",),
    "prefix_repetition_prefix_len": ("prefix_repetition",),
    "prefix_repetition_suffix_len": ("prefix_repetition",),
    "prefix_repetition_num_prefixes": ("prefix_repetition",),
    "prefix_repetition_output_len": ("prefix_repetition",),
    "input_mean": ("normal",),
    "input_std": ("normal",),
    "output_mean": ("normal",),
    "output_std": ("normal",),
    "trace_format": ("trace",),
    "trace_time_scale": ("trace",),
    "hash_block_size": ("trace",),
}


def add_workload_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "workload (vllm bench serve's flag names)",
        "Lengths are in tokens, times on the virtual clock. Without --dataset-name or --trace: "
        "the lesson's mixed traffic (90% prompts of 100-1500 tokens, 10% of 6000-7800).")
    group.add_argument("--dataset-name", choices=SYNTHETIC, default=None,
                       help="synthetic lengths: mixed (the default), random, normal, or "
                            "prefix_repetition (shared prefixes)")
    group.add_argument("--num-prompts", type=int, default=None, metavar="N",
                       help=f"requests to send (default {DEFAULT_NUM_PROMPTS}; with --trace: the "
                            "first N requests of the file, default all)")
    group.add_argument("--request-rate", type=float, default=None, metavar="PER_S",
                       help=f"mean arrivals per second; inf sends all at t=0 (default "
                            f"{MIXED_REQUEST_RATE:g} for mixed, inf for random and normal, as in "
                            "vllm bench serve)")
    group.add_argument("--burstiness", type=float, default=None, metavar="SHAPE",
                       help="gamma shape of the gaps between arrivals: 1 = Poisson (default), "
                            "lower = burstier at the same mean rate")
    group.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                       help="at most N requests in flight; the next is sent when one finishes "
                            "(a closed loop of N clients; default: no limit)")
    group.add_argument("--seed", type=int, default=0,
                       help="draws another instance of a synthetic dataset: 0 to 2^32 - 1, "
                            "as vllm bench serve takes (default 0)")

    random_group = parser.add_argument_group(
        "--dataset-name random",
        "Lengths uniform in [floor(L x (1-R)), ceil(L x (1+R))], both ends included, as vLLM "
        "samples them.")
    random_group.add_argument("--random-input-len", type=int, default=None, metavar="TOKENS",
                              help=f"prompt length L (default {RANDOM.input_len})")
    random_group.add_argument("--random-output-len", type=int, default=None, metavar="TOKENS",
                              help=f"output length L (default {RANDOM.output_len})")
    random_group.add_argument("--random-range-ratio", type=float, default=None, metavar="R",
                              help=f"spread R around L, in [0, 1) (default {RANDOM.range_ratio:g}: "
                                   "every request gets exactly L)")
    random_group.add_argument("--random-prefix-len", type=int, default=None, metavar="TOKENS",
                              help="a prefix every prompt opens with, before its L random tokens "
                                   "(default 0; prefix caching finds it cached)")

    repetition_group = parser.add_argument_group(
        "--dataset-name prefix_repetition",
        "N prefixes, each opening num_prompts // N prompts with suffixes of their own, shuffled, "
        "as vllm bench serve builds them.")
    for name, default in PREFIX_REPETITION.items():
        what = {"prefix_len": "shared prefix tokens per prompt",
                "suffix_len": "tokens of each prompt's own suffix",
                "num_prefixes": "prefixes (N)", "output_len": "output tokens per request"}[name]
        repetition_group.add_argument(f"--prefix-repetition-{name.replace('_', '-')}", type=int,
                                      default=None, metavar="N",
                                      help=f"{what} (default {default})")

    normal_group = parser.add_argument_group(
        "--dataset-name normal",
        "Normally distributed lengths, rounded and clipped to [1, --max-model-len]; the output "
        "defaults are exercise 4's.")
    for flag, default in (("--input-mean", NORMAL.input_mean), ("--input-std", NORMAL.input_std),
                          ("--output-mean", NORMAL.output_mean),
                          ("--output-std", NORMAL.output_std)):
        kind = "mean" if flag.endswith("mean") else "standard deviation"
        side = "prompt" if flag.startswith("--input") else "output"
        normal_group.add_argument(flag, type=float, default=None, metavar="TOKENS",
                                  help=f"{side} length {kind} (default {default:g})")

    trace_group = parser.add_argument_group(
        "trace replay",
        "Replays a real service's requests with the trace's own gaps, from its first request.")
    trace_group.add_argument("--trace", default=None, metavar="FILE|NAME",
                             help="the trace file (.gz read too), or a shipped trace by name: "
                                  f"{', '.join(shipped_traces())} (code/traces/README.md); "
                                  "its format is told from its first line")
    trace_group.add_argument("--trace-format", choices=TRACE_FORMATS, default=None,
                             help="azure: TIMESTAMP,ContextTokens,GeneratedTokens; mooncake: JSON "
                                  "lines, timestamp in ms; burstgpt: Timestamp (s), Request "
                                  "tokens, Response tokens (0 = failed, skipped); csv: "
                                  "arrival_s,prompt_len,output_len[,id]")
    trace_group.add_argument("--hash-block-size", type=int, default=None, metavar="TOKENS",
                             help="prompt tokens per Mooncake hash id (default "
                                  f"{DEFAULT_HASH_BLOCK_SIZE}, as in Mooncake's traces; the last "
                                  "of a prompt may be cut short)")
    trace_group.add_argument("--trace-time-scale", type=float, default=None, metavar="S",
                             help="multiply every gap by S: S > 1 stretches the trace (2 = half "
                                  "the request rate), S < 1 compresses it (0.5 = twice the rate), "
                                  "0 sends all at t=0 (default 1, as in Vidur's "
                                  "time_scale_factor)")


def workload_from_args(args: argparse.Namespace, config: EngineConfig,
                       modes: tuple = ()) -> Workload:
    """The workload the flags ask for, checked: every option, that the machine can hold a run
    of it in `modes` (estimate.py, which also announces a long one before anything slow), and
    that the virtual clock can still count steps at the last arrival."""
    workload = _workload(args, config)
    estimate.check_size(workload, config, modes, charts=getattr(args, "svg", None) is not None)
    check_clock_resolution(workload, make_clock(config).shortest_step_s(), workload_kind(args))
    return workload


def _workload(args: argparse.Namespace, config: EngineConfig) -> Workload:
    kind = workload_kind(args)
    check_options_belong(args, kind)
    if kind == "trace":
        return trace_workload(args.trace, args.trace_format, args.num_prompts,
                              time_scale=given(args.trace_time_scale, 1.0),
                              max_concurrency=args.max_concurrency,
                              hash_block_size=given(args.hash_block_size,
                                                    DEFAULT_HASH_BLOCK_SIZE))
    sending = {"num_prompts": given(args.num_prompts, DEFAULT_NUM_PROMPTS),
               "burstiness": given(args.burstiness, 1.0), "seed": args.seed,
               "max_concurrency": args.max_concurrency}
    if kind == "mixed":
        return mixed_workload(request_rate=given(args.request_rate, MIXED_REQUEST_RATE),
                              **sending)
    sending["request_rate"] = given(args.request_rate, math.inf)  # vllm bench serve's default
    if kind == "random":
        return random_workload(input_len=given(args.random_input_len, RANDOM.input_len),
                               output_len=given(args.random_output_len, RANDOM.output_len),
                               range_ratio=given(args.random_range_ratio, RANDOM.range_ratio),
                               prefix_len=given(args.random_prefix_len, 0), **sending)
    if kind == "prefix_repetition":
        return prefix_repetition_workload(
            **{name: given(getattr(args, f"prefix_repetition_{name}"), default)
               for name, default in PREFIX_REPETITION.items()}, **sending)
    return normal_workload(input_mean=given(args.input_mean, NORMAL.input_mean),
                           input_std=given(args.input_std, NORMAL.input_std),
                           output_mean=given(args.output_mean, NORMAL.output_mean),
                           output_std=given(args.output_std, NORMAL.output_std),
                           max_model_len=config.max_model_len, **sending)


def check_clock_resolution(workload: Workload, shortest_step_s: float, kind: str) -> None:
    """The virtual clock is a float of seconds, which at time T moves in steps of about
    T x 2.2e-16: far enough along, a short step would change it by nothing (frozen time, every
    latency 0) or by a rounded amount. So the last arrival must come early enough that even the
    cheapest step the clock prices is a thousand times the clock's resolution there."""
    span_s = workload.planned_span_s()
    limit_s = shortest_step_s / (CLOCK_RESOLUTION_MARGIN * sys.float_info.epsilon)
    if not span_s <= limit_s:  # inf and NaN too
        shorten = ("a smaller --trace-time-scale or fewer requests (--num-prompts)"
                   if kind == "trace" else "a higher --request-rate or fewer --num-prompts")
        raise WorkloadError(
            f"the requests arrive over {span_s:.3g} s of virtual time, too long for the clock to "
            f"count a {shortest_step_s * 1000:.3g} ms step at the end; keep it under "
            f"{limit_s:.3g} s: {shorten}")


def workload_kind(args: argparse.Namespace) -> str:
    if args.trace is None:
        return args.dataset_name or "mixed"
    if args.dataset_name is not None:
        raise WorkloadError(f"--dataset-name {args.dataset_name} and --trace both say what to "
                            "send; give one of them")
    return "trace"


def check_options_belong(args: argparse.Namespace, kind: str) -> None:
    for option, kinds in OPTION_WORKLOADS.items():
        if getattr(args, option) is not None and kind not in kinds:
            flag = "--" + option.replace("_", "-")
            raise WorkloadError(f"{flag} does not apply to {_workload_name(kind)}; it is for "
                                f"{', '.join(_workload_name(k) for k in kinds)}"
                                + _hint(kind, kinds))


def _workload_name(kind: str) -> str:
    return "--trace" if kind == "trace" else f"--dataset-name {kind}"


def _hint(kind: str, kinds: tuple) -> str:
    if kind == "trace" and kinds == SYNTHETIC:
        return " (a trace brings its own arrival times: scale them with --trace-time-scale)"
    return ""


def given(value, default):
    """The option's value if the user gave it, else the dataset's default."""
    return default if value is None else value
