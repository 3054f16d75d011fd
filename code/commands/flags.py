"""The flags the commands share, and what they turn into: a checked `Engine` and the `Outputs`.

Engine flags carry vLLM's names and map 1:1 to `EngineConfig` fields (`--max-num-seqs` ->
`max_num_seqs`); the workload's are `vllm bench serve`'s (workload_flags.py). A flag that a knob at
the top of code/main.py also sets defaults to None here, meaning "not given: take the knob", so
that a refusal can name where the value came from: the flag, or the knob.

Every value is parsed and checked before any simulation or file: a bad one becomes one
`ConfigError` line naming the flag and what would be valid. Where each check lives:

    an engine flag         its EngineConfig field's row in config.FIELD_RULES, and vLLM's rules
                           tying fields together in config.py (`validate`, `validate_scheduler`)
    a workload flag        workload.py's Ranges; the span the clock must resolve, workload_flags.py
    an output flag         here (`outputs_from_args`, the `parse_...` functions); its file's path
                           in output_files.py
    a --[no-]FLAG pair     `add_switch`: both spellings at once are refused, not last-one-wins
"""

import argparse
import json
import math
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Optional

from commands import cluster_flags, progress
from commands.memory_advice import advised_plan
from commands.output_files import check_paths
from commands.serving import Engine
from commands.speculative_flag import EXAMPLE as SPECULATIVE_EXAMPLE
from commands.speculative_flag import parse_speculative_config
from config import MAX_TOKENS, ConfigError, EngineConfig, Knobs, Range, flag_name
from engine_overhead import VERSIONS
from forward_model import make_clock
from goodput import CHAT_SLOS_MS, SLO_NAMES
from modes import MODES
from presets import DTYPES, GPUS, MODELS, QUANTIZATIONS, default_max_model_len
from reports.serving_block import PERCENTILE_METRICS
from reports.timeline import ANCHORS, TimelineSpec
from spec_decode import MODELLED_METHODS

DEFAULTS = EngineConfig()
DEFAULT_TIMELINE_STEPS = 16
GOODPUT_EXAMPLE = "ttft:2000 tpot:50 e2el:20000"
CHAT_GOODPUT = tuple(f"{name}:{ms:g}" for name, ms in CHAT_SLOS_MS.items())  # compare, sweep
CHAT_GOODPUT_NOTE = "the default: an interactive chat"
SLO_MS = Range(0, math.inf, unit="ms")
# Flags that name a file the run reads: no output may be written over one of them.
INPUT_FLAGS = (("--trace", "trace"), ("--observed", "observed"))
# A timeline keeps the rows it may draw while the engine runs: 10,000 rows is a long read already.
TIMELINE_STEPS = Range(1, 10_000, integer=True, unit="steps")


# -- the flags -----------------------------------------------------------------------------------

def add_engine_flags(parser: argparse.ArgumentParser, knobs: Knobs,
                     budget_list: bool = False) -> None:
    """`budget_list`: --max-num-batched-tokens takes a comma list (sweep's budget sweep)."""
    group = parser.add_argument_group("engine (vLLM's flag names)")
    group.add_argument("--model", default=DEFAULTS.model, metavar="PRESET|CONFIG_JSON",
                       help=f"a model preset ({', '.join(MODELS)}) or a Hugging Face "
                            f"config.json, the file or a folder holding it (default "
                            f"{DEFAULTS.model})")
    group.add_argument("--quantization", default=None, choices=list(QUANTIZATIONS),
                       help="weights' method: fp8 quantizes a 16-bit checkpoint at load (default: "
                            "as the checkpoint ships, its quantization_config)")
    group.add_argument("--dtype", default=DEFAULTS.dtype, choices=list(DTYPES),
                       help="16-bit type of unquantized weights (default auto: torch_dtype)")
    add_switch(group, "--enable-expert-parallel", default=DEFAULTS.enable_expert_parallel,
               help="MoE models: whole experts spread over the tensor x data parallel GPUs, "
                    "two all-to-alls per MoE layer instead of one all-reduce (default off)")
    group.add_argument("--data-parallel-size", type=int, default=DEFAULTS.data_parallel_size,
                       metavar="N", help="N replicas of the engine behind one router (--router, "
                                         "cluster.py); with --enable-expert-parallel: N attention "
                                         "ranks of one engine, each with its own KV cache and "
                                         "share of the batch (default 1)")
    group.add_argument("--gpu", default=DEFAULTS.gpu, choices=list(GPUS),
                       help=f"GPU preset (default {DEFAULTS.gpu})")
    group.add_argument("--tensor-parallel-size", type=int, default=DEFAULTS.tensor_parallel_size,
                       metavar="N", help="GPUs sharing weights and KV (default 1)")
    group.add_argument("--gpu-memory-utilization", type=float, metavar="F",
                       default=DEFAULTS.gpu_memory_utilization,
                       help="share of GPU memory for weights + activations + KV (default 0.9)")
    group.add_argument("--kv-cache-dtype", default=DEFAULTS.kv_cache_dtype, choices=["auto", "fp8"],
                       help="auto = the model's 16-bit activation dtype")
    group.add_argument("--block-size", type=int, default=None, metavar="TOKENS",
                       help=f"tokens per KV block (default {knobs.block_size}: BLOCK_SIZE in "
                            "code/main.py)")
    group.add_argument("--num-gpu-blocks-override", type=int, default=None, metavar="N",
                       help="use N KV blocks instead of sizing the pool from memory")
    group.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                       help=f"prompt + output cap (default: a config.json model's "
                            f"max_position_embeddings, as vLLM; {DEFAULTS.max_model_len} for the "
                            "hand-written presets)")
    group.add_argument("--max-num-seqs", type=int, default=None, metavar="N",
                       help=f"most requests per batch; STATIC's batch size (default "
                            f"{knobs.max_num_seqs}: MAX_NUM_SEQS in code/main.py)")
    budget_help = (f"token budget per step of every continuous mode (default: "
                   f"{knobs.max_num_batched_tokens} with chunked prefill, MAX_NUM_BATCHED_TOKENS "
                   "in code/main.py; max(max_model_len, 2048) without, as vLLM)")
    if budget_list:
        group.add_argument("--max-num-batched-tokens", metavar="TOKENS[,TOKENS...]",
                           default=None, help=budget_help + "; a comma list, e.g. "
                           "256,512,1024,2048,8192, sweeps the budget at one load")
    else:
        group.add_argument("--max-num-batched-tokens", type=int, metavar="TOKENS", default=None,
                           help=budget_help)
    group.add_argument("--long-prefill-token-threshold", type=int, metavar="TOKENS",
                       default=DEFAULTS.long_prefill_token_threshold,
                       help="cap on one request's prompt tokens per step (0 = off)")
    add_switch(group, "--enable-chunked-prefill",
               help="choose CONTINUOUS+CHUNKED (or, with --no-..., CONTINUOUS) as the "
                    "continuous mode")
    add_switch(group, "--enable-prefix-caching", default=DEFAULTS.enable_prefix_caching,
               help="reuse cached KV blocks of shared prompt prefixes (default on, as in vLLM "
                    "V1; CONTINUOUS and CONTINUOUS+CHUNKED only)")
    group.add_argument("--speculative-config", default=None, metavar="JSON",
                       help=f"speculative decoding, with vLLM's keys, e.g. '{SPECULATIVE_EXAMPLE}'"
                            f"; method: {', '.join(MODELLED_METHODS)} (draft_model's model: a "
                            "--model preset, e.g. llama-3.2-1b; an EAGLE head is sized from the "
                            "target); modes continuous and chunked only (default: off)")
    group.add_argument("--spec-acceptance-rate", type=float, default=None, metavar="A",
                       help="servesim's own knob: each draft is accepted with probability A "
                            "given the drafts before it (default: the method's published "
                            "per-position figures; ngram and eagle have none)")
    # vLLM V0's flags, gone since 2025: kept only to say how to write them now.
    group.add_argument("--speculative-model", default=None, help=argparse.SUPPRESS)
    group.add_argument("--num-speculative-tokens", type=int, default=None, help=argparse.SUPPRESS)
    group.add_argument("--batching-window-ms", type=float, default=DEFAULTS.batching_window_ms,
                       metavar="MS", help="STATIC: longest wait for a full batch (default 10)")
    group.add_argument("--forward-model", default=DEFAULTS.forward_model,
                       choices=["roofline", "linear"],
                       help="roofline: step time from FLOPs and bytes; linear: the lesson toy's")
    group.add_argument("--vllm-version", default=DEFAULTS.vllm_version, choices=list(VERSIONS),
                       help="whose CPU work per step the roofline clock adds, and its defaults: "
                            "0.6 (V0: CPU per scheduled request, sync only), 0.18.0 and 0.30.0 "
                            f"(V1, async scheduling on) (default {DEFAULTS.vllm_version})")
    add_switch(group, "--async-scheduling",
               help="schedule step n+1 while step n runs on the GPU, before its output is "
                    "known (a finish is seen one step later; the CPU's work overlaps the GPU's); "
                    "default: the --vllm-version's, on in 0.18.0 and 0.30.0, absent in 0.6; "
                    "CONTINUOUS and CONTINUOUS+CHUNKED only")
    group.add_argument("--linear-step-ms", type=float, default=DEFAULTS.linear_step_ms,
                       metavar="MS", help="linear clock: per step (default 0.2)")
    group.add_argument("--linear-prefill-token-ms", type=float, metavar="MS",
                       default=DEFAULTS.linear_prefill_token_ms,
                       help="linear clock: per prompt token (default 0.04)")
    group.add_argument("--linear-decode-token-ms", type=float, metavar="MS",
                       default=DEFAULTS.linear_decode_token_ms,
                       help="linear clock: per decode token (default 0.5)")
    cluster_flags.add_cluster_flags(parser)


class Switch(argparse.BooleanOptionalAction):
    """`--x` / `--no-x`, refusing both at once. (vLLM's argparse lets the last one win
    silently; here a learner who typed both meant something the run would not show.)"""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("switches_given", {})  # flag -> spelling used
        earlier = given.setdefault(self.dest, option_string)
        if earlier != option_string:
            raise argparse.ArgumentError(self, f"{earlier} and {option_string} both given; "
                                               "give one of them")
        super().__call__(parser, namespace, values, option_string)


def add_switch(group, flag: str, help: str, default: Optional[bool] = None) -> None:
    """A --[no-]FLAG pair, as vLLM's boolean flags are spelled."""
    group.add_argument(flag, action=Switch, default=default, help=help)


def add_mode_flag(group, default: Optional[str], default_text: str, one: bool = False) -> None:
    if one:
        text = "one of naive, static, continuous, chunked"
    else:
        text = "comma list of naive, static, continuous, chunked, or all"
    group.add_argument("--mode", default=default, help=f"{text} (default {default_text})")


def add_format_flags(group, step_log: bool = True) -> None:
    group.add_argument("--format", choices=["table", "json"], default="table")
    if step_log:
        group.add_argument("--step-log", default=None, metavar="FILE",
                           help="write one JSON line per engine step to FILE")


def add_goodput_flag(parser: argparse.ArgumentParser, default: str = "none") -> None:
    parser.add_argument_group("goodput (vllm bench serve's flag)").add_argument(
        "--goodput", nargs="+", default=None, metavar="KEY:MS",
        help=f"SLOs in milliseconds, e.g. {GOODPUT_EXAMPLE}; request goodput (req/s) "
             "= requests meeting every SLO given, per second of the run's duration "
             f"(default {default})")


def add_chat_goodput_flag(parser: argparse.ArgumentParser) -> None:
    """--goodput defaulting to an interactive chat's SLOs (goodput.CHAT_SLOS_MS says why)."""
    add_goodput_flag(parser, default=" ".join(CHAT_GOODPUT) + ": an interactive chat, whose "
                     "answer starts within 2 s (MLPerf's TTFT bound for Llama-2-70B serving) and "
                     "streams at 10 tokens/s or faster, about twice reading pace")


def goodput_note(args: argparse.Namespace) -> str:
    """Where the SLOs in a header came from: said only when they are the chat default."""
    return "" if args.goodput else CHAT_GOODPUT_NOTE


def add_percentile_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("percentiles (vllm bench serve's flags)")
    group.add_argument("--metric-percentiles", default="99", metavar="P[,P...]",
                       help="percentiles to print for each metric, e.g. 50,90,99 (default 99)")
    group.add_argument("--percentile-metrics", default=",".join(PERCENTILE_METRICS),
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


# -- from flags to a checked engine --------------------------------------------------------------

def config_from_args(args: argparse.Namespace,
                     knobs: Knobs) -> tuple[EngineConfig, Callable[[str], str]]:
    """The EngineConfig the flags and knobs make, checked; and how to name each field in a
    refusal (the flag if it was given, else the knob that set it)."""
    values = {f.name: getattr(args, f.name) for f in fields(EngineConfig) if hasattr(args, f.name)}
    from_knobs = set()
    for field_name, knob_value in knobs.engine_defaults().items():
        if values.get(field_name) is None:
            values[field_name] = knob_value
            from_knobs.add(field_name)

    def name(field_name: str) -> str:
        return Knobs.name(field_name) if field_name in from_knobs else flag_name(field_name)

    if "speculative_config" in values:
        values["speculative_config"] = speculative_config_from_args(args)
        _check_async_scheduling_asked(args, values["speculative_config"])
    if values.get("max_model_len", 0) is None:
        values["max_model_len"] = model_max_model_len(values.get("model", DEFAULTS.model))
    if "async_scheduling" in values and values["async_scheduling"] is None:  # the version's
        version = VERSIONS.get(values.get("vllm_version", DEFAULTS.vllm_version))
        values["async_scheduling"] = (version.async_scheduling_default if version
                                      else DEFAULTS.async_scheduling)
    config = EngineConfig(**values)
    config.validate(name)
    return config, name


def model_max_model_len(model: str) -> int:
    """--max-model-len when not given: the model's max_position_embeddings (vLLM's default),
    the lesson's 8,192 for a hand-written preset; a model that cannot be read is refused by
    validation, with the key it lacks. Capped at servesim's MAX_TOKENS (Llama-4-Scout says 10.5
    million), so that the refusal is about the KV cache it cannot hold, with a length that fits."""
    try:
        return min(default_max_model_len(model, DEFAULTS.max_model_len), MAX_TOKENS)
    except ValueError:
        return DEFAULTS.max_model_len


def speculative_config_from_args(args: argparse.Namespace):
    """--speculative-config (and --spec-acceptance-rate) parsed; V0's flags refused in one line
    that writes the same with --speculative-config."""
    if args.speculative_model is not None or args.num_speculative_tokens is not None:
        raise ConfigError(removed_speculative_flags(args.speculative_model,
                                                    args.num_speculative_tokens))
    if args.speculative_config is None:
        if args.spec_acceptance_rate is not None:
            raise ConfigError(f"--spec-acceptance-rate needs --speculative-config, e.g. "
                              f"'{SPECULATIVE_EXAMPLE}'")
        return None
    speculative = parse_speculative_config(args.speculative_config)
    if args.spec_acceptance_rate is not None:
        speculative = replace(speculative, acceptance_rate=args.spec_acceptance_rate)
    return speculative


def removed_speculative_flags(model: Optional[str], num_tokens: Optional[int]) -> str:
    """vLLM V0's `--speculative-model M --num-speculative-tokens K`, written as V1 wants it."""
    if model in ("[ngram]", "ngram"):
        equivalent = {"method": "ngram"}
    else:
        equivalent = {"model": model or "llama-3.2-1b"}
    equivalent["num_speculative_tokens"] = num_tokens or 3
    flag = "--speculative-model" if model is not None else "--num-speculative-tokens"
    return (f"{flag} was removed from vLLM with V0's speculative flags (PR #15466, 2025; "
            f"v0.18.0 calls it an unrecognized argument): write --speculative-config "
            f"'{json.dumps(equivalent)}' instead")


def modes_from_args(args: argparse.Namespace, default_names, knob: Optional[str] = None) -> list:
    """--mode (or the default names; `knob` names where they were set) as mode objects."""
    explicit = args.mode is not None
    text = args.mode if explicit else ",".join(default_names)
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        names = list(MODES)
    unknown = [n for n in names if n not in MODES]
    if unknown or not names:
        where = "--mode" if explicit or knob is None else knob
        raise ConfigError(f"unknown {where} {','.join(unknown) or text!r}; "
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


def _check_async_scheduling_asked(args: argparse.Namespace, speculative) -> None:
    """vLLM 0.30.0 refuses --async-scheduling given with n-gram drafts (found on the CPU after
    each step's output, which async scheduling does not wait for); left to its default, it turns
    async scheduling off for them instead (vllm/config/vllm.py)."""
    given = getattr(args, "switches_given", {}).get("async_scheduling")
    if given == "--async-scheduling" and speculative is not None and speculative.method == "ngram":
        raise ConfigError("--async-scheduling with --speculative-config method ngram: vLLM "
                          "refuses this (async scheduling takes EAGLE, MTP, draft-model or "
                          "ngram_gpu drafts); leave the flag out (n-gram drafts are then "
                          "scheduled synchronously) or use method ngram_gpu")


def engine_from_args(args: argparse.Namespace, context, modes: list,
                     default_goodput=()) -> Engine:
    """Config, modes, memory plan, clock and SLOs, every one checked; `context` is cli.Context."""
    config, name = config_from_args(args, context.knobs)
    for mode in modes:
        mode.check(config, name)
    slos_ms = parse_goodput(getattr(args, "goodput", None) or list(default_goodput))
    config = cluster_flags.replica_config(config, args)  # replicas: each one engine of its own
    plan = advised_plan(config, profiled_chunking(modes))
    simulate = cluster_flags.cluster_simulate(args, context.simulate, config, modes, plan)
    return Engine(simulate, config, modes, plan, make_clock(config),
                  slos_ms, show_progress=progress.wanted(args.format))


def profiled_chunking(modes: list) -> Optional[bool]:
    """Whose token budget sizes vLLM's profiling pass (gpu_memory.profile_num_tokens) for the
    one pool these modes share: the continuous mode's when one runs, else None (the larger of
    both budgets; NAIVE and STATIC run whole prompts, as CONTINUOUS does)."""
    chunking = {mode.enable_chunked_prefill for mode in modes if hasattr(mode,
                                                                          "enable_chunked_prefill")}
    return chunking.pop() if len(chunking) == 1 else None


# -- what to show and write ----------------------------------------------------------------------

@dataclass
class Outputs:
    """What to show and which files to write, as the flags asked."""
    format: str = "table"                       # "table" or "json" on stdout
    svg: Optional[str] = None                   # --svg PATH
    timeline: Optional[TimelineSpec] = None     # --timeline / --timeline-at
    step_log: Optional[str] = None              # --step-log FILE
    save_detailed: Optional[str] = None         # --save-detailed FILE
    block_table: Optional[str] = None           # --block-table ID (run only)
    html: Optional[str] = None                  # --html FILE (run and compare)
    percentiles: list[float] = field(default_factory=lambda: [99.0])
    percentile_metrics: list[str] = field(default_factory=lambda: list(PERCENTILE_METRICS))
    input_paths: list[tuple[str, str]] = field(default_factory=list)  # (flag, path) of files
    #                                             read, which no output may overwrite

    def file_paths(self) -> list[tuple[str, str]]:
        """(flag, path) of every file to write."""
        paths = (("--svg", self.svg), ("--save-detailed", self.save_detailed),
                 ("--step-log", self.step_log), ("--html", self.html))
        return [(flag, path) for flag, path in paths if path is not None]


def outputs_from_args(args: argparse.Namespace) -> Outputs:
    """What to show and write; every choice checked here, before anything runs. (A flag the
    command does not have counts as not given: sweep has no --timeline, for instance.)"""
    outputs = Outputs(format=args.format, svg=args.svg,
                      step_log=getattr(args, "step_log", None),
                      save_detailed=getattr(args, "save_detailed", None),
                      html=getattr(args, "html", None),
                      input_paths=[(flag, getattr(args, name)) for flag, name in INPUT_FLAGS
                                   if getattr(args, name, None) is not None])
    if getattr(args, "timeline", None) is not None or getattr(args, "timeline_at", None):
        if args.format == "json":
            raise ConfigError("--timeline draws text; leave it out with --format json")
        num_steps = DEFAULT_TIMELINE_STEPS if args.timeline is None else args.timeline
        outputs.timeline = parse_timeline_spec(num_steps, args.timeline_at or "start")
    outputs.block_table = getattr(args, "block_table", None)
    if outputs.block_table is not None and args.format == "json":
        raise ConfigError("--block-table draws text; leave it out with --format json")
    if hasattr(args, "metric_percentiles"):
        outputs.percentiles = parse_percentiles(args.metric_percentiles)
        outputs.percentile_metrics = parse_percentile_metrics(args.percentile_metrics)
    check_paths(outputs)
    return outputs


# -- one flag's text to a value ------------------------------------------------------------------

def parse_goodput(pairs: list[str]) -> dict[str, float]:
    """`["ttft:2000", "tpot:50"]` -> `{"ttft": 2000.0, "tpot": 50.0}` (milliseconds).

    Refuses, in one line, anything vLLM's `--goodput` would refuse: a pair that is not KEY:VALUE,
    an unknown key, a negative or non-numeric value. A key given twice keeps its last value,
    as in vLLM.
    """
    slos_ms = {}
    for pair in pairs:
        name, separator, value_text = pair.partition(":")
        if not separator or ":" in value_text:
            raise ConfigError(f"--goodput {pair!r} is not KEY:MILLISECONDS; give pairs like "
                              f"{GOODPUT_EXAMPLE}")
        if name not in SLO_NAMES:
            raise ConfigError(f"--goodput {pair!r}: unknown metric {name!r}; "
                              f"choose from {', '.join(SLO_NAMES)} (e.g. {GOODPUT_EXAMPLE})")
        slos_ms[name] = _milliseconds(pair, value_text)
    return slos_ms


def _milliseconds(pair: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not SLO_MS.contains(value):  # NaN and inf fail too: a target of inf is no target
        raise ConfigError(f"--goodput {pair!r}: the target must be {SLO_MS.describe()} "
                          f"(e.g. {GOODPUT_EXAMPLE})")
    return value


def parse_percentiles(text: str) -> list[float]:
    """--metric-percentiles "50,90,99" -> [50.0, 90.0, 99.0]."""
    percentiles = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 100:
            raise ConfigError("--metric-percentiles takes a comma list of numbers in [0, 100], "
                              f"e.g. 50,90,99; got {item!r}")
        percentiles.append(value)
    return percentiles


def parse_percentile_metrics(text: str) -> list[str]:
    """--percentile-metrics "ttft,itl" -> ["ttft", "itl"] (printed in vLLM's order anyway)."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in PERCENTILE_METRICS]
    if unknown:
        raise ConfigError(f"--percentile-metrics: unknown {','.join(unknown)!r}; choose from "
                          f"{','.join(PERCENTILE_METRICS)}")
    return names


def parse_loads(flag: str, text: str, integer: bool) -> list[float]:
    """"1,2,4,8" -> [1.0, 2.0, 4.0, 8.0]: positive, rising (inf allowed for rates)."""
    loads = []
    for item in text.split(","):
        try:
            value = int(item) if integer else float(item)
        except ValueError:
            value = -1
        if not value > 0 or (integer and math.isinf(value)):
            kind = "positive integers" if integer else "positive numbers (or inf)"
            raise ConfigError(f"{flag} takes a comma list of {kind}, e.g. "
                              f"{'1,8,32' if integer else '1,2,4,8'}; got {item!r} in {text!r}")
        loads.append(value)
    if any(later <= earlier for earlier, later in zip(loads, loads[1:])):
        raise ConfigError(f"{flag} must rise from point to point (e.g. 1,2,4,8), got {text!r}")
    return loads


def parse_timeline_spec(num_steps: int, where: str) -> TimelineSpec:
    """`--timeline N --timeline-at WHERE` -> a TimelineSpec, or one line saying what is valid."""
    TIMELINE_STEPS.check("--timeline", num_steps)
    if where in ("start", "worst-itl"):
        return TimelineSpec(num_steps, where)
    prefix, _, request_id = where.partition(":")
    if prefix == "request" and request_id:
        return TimelineSpec(num_steps, "request", request_id)
    raise ConfigError(f"--timeline-at must be one of {', '.join(ANCHORS)} "
                      f"(e.g. request:7), got {where!r}")
