"""`python code/main.py calibration`: the virtual clock against published measurements.

servesim's clock (`forward_model.py`) prices a step from FLOPs, bytes and a few fixed costs. How
far can its figures be trusted? This command replays published measurements of real engines on
real GPUs, each as a servesim run of the same model, hardware and workload, and prints, per
measurement, the published figure, servesim's, and their ratio:

    ratio = servesim / published      below 1: a time came out shorter, a throughput lower
    |ln(ratio)|                       the error either way: 0.10 is about 10%, 0.40 about 50%

Three groups, each with its goal:

    published      16 measurements of vLLM, NIM and TensorRT-LLM serving (each group's
                   sources below): batch latency, TTFT, ITL, throughput
    throughput     TensorRT-LLM's offline throughput for Llama-3.3-70B FP8 (another engine: a band)
    kv             the KV capacity vLLM logged for the lesson's setup

The figures are data copied from the sources named beside them; the servesim side is computed
each time, so the table follows the clock and the presets. `Measurement.flags()` is the
`python code/main.py run` command line that reproduces a row on its own.
"""

import json
import math
import statistics
import textwrap
from dataclasses import dataclass, field
from typing import Optional

from commands.calibration_moe import MOE_ASIDE_ROWS, MOE_ASIDE_SOURCES, MOE_ROWS, MOE_SOURCES
from config import EngineConfig
from forward_model import RooflineClock
from gpu_memory import plan_memory
from modes import MODES
from workload import random_workload

# A measurement's `workload` keys, as `run` flags (vllm bench serve's random dataset).
RANDOM_WORKLOAD_FLAGS = {"input_len": "--random-input-len", "output_len": "--random-output-len",
                         "num_prompts": "--num-prompts", "max_concurrency": "--max-concurrency"}


@dataclass(frozen=True)
class Measurement:
    id: str
    what: str            # the measurement, as its source describes it
    published: float     # in `unit`
    unit: str            # "ms", "tok/s" or "tokens"
    result_field: str    # servesim's figure: a `--format json` result field, "duration_ms"
    #                      (the run's duration in ms) or "kv_cache_tokens" (the KV pool)
    engine: dict         # EngineConfig fields that differ from the defaults
    mode: str = "continuous"
    workload: dict = field(default_factory=dict)  # random_workload arguments (all sent at t=0)

    def config(self) -> EngineConfig:
        return EngineConfig(**self.engine)

    def make_workload(self):
        return random_workload(self.workload["input_len"], self.workload["output_len"], 0.0,
                               num_prompts=self.workload["num_prompts"],
                               max_concurrency=self.workload.get("max_concurrency"))

    def flags(self) -> str:
        """The `python code/main.py run` flags that reproduce this measurement's setup."""
        defaults = EngineConfig()
        parts = [f"--mode {self.mode}"]
        for name, value in self.engine.items():  # EngineConfig fields map 1:1 to flags
            # --max-model-len's default follows the model (its max_position_embeddings): said
            # whenever a row sets it.
            if value == getattr(defaults, name) and name != "max_model_len":
                continue
            if value is True:  # a switch: --enable-expert-parallel
                parts.append(f"--{name.replace('_', '-')}")
            else:
                parts.append(f"--{name.replace('_', '-')} {value}")
        if self.workload:
            parts.append("--dataset-name random")
            parts += [f"{flag} {self.workload[key]}" for key, flag in RANDOM_WORKLOAD_FLAGS.items()
                      if key in self.workload]
        return " ".join(parts)


@dataclass(frozen=True)
class Group:
    name: str
    title: str
    sources: tuple[str, ...]          # one line per source, printed under the group's table
    measurements: tuple[Measurement, ...]
    max_median_abs_ln: Optional[float] = None  # goal on the median |ln ratio|, if any
    max_worst_abs_ln: Optional[float] = None   # goal on the worst |ln ratio|, if any
    ratio_band: Optional[tuple[float, float]] = None  # goal on every ratio, if any


def _batch_latency(id_: str, what: str, published_ms: float, **engine) -> Measurement:
    """vLLM's benchmark_latency: 8 prompts of 32 tokens, 128 output tokens each, sent at once;
    the figure is the whole batch's latency, servesim's duration."""
    return Measurement(id_, what, published_ms, "ms", "duration_ms", engine,
                       workload=dict(input_len=32, output_len=128, num_prompts=8))


def _nim(id_: str, what: str, published: float, unit: str, result_field: str, input_len: int,
         output_len: int, concurrency: int, num_prompts: int) -> Measurement:
    """NVIDIA NIM (TensorRT-LLM) on 2 x H100, Llama-3.3-70B FP8 with FP8 KV, genai-perf at a
    constant concurrency; servesim's chunked scheduler with NIM's 8,192-token step budget."""
    engine = dict(model="llama-3.3-70b-fp8", gpu="h100-sxm5", tensor_parallel_size=2,
                  kv_cache_dtype="fp8", max_num_batched_tokens=8192)
    return Measurement(id_, what, published, unit, result_field, engine, mode="chunked",
                       workload=dict(input_len=input_len, output_len=output_len,
                                     num_prompts=num_prompts, max_concurrency=concurrency))


def _first_token(id_: str, what: str, published_ms: float, prompt_len: int,
                 **engine) -> Measurement:
    """TensorRT-LLM's gptSessionBenchmark at batch 1 with one output token: the prefill alone."""
    return Measurement(id_, what, published_ms, "ms", "mean_ttft_ms",
                       dict(engine, max_model_len=4096),
                       workload=dict(input_len=prompt_len, output_len=1, num_prompts=1))


_LLAMA_3_8B = dict(model="llama-3.1-8b")                            # Llama-3-8B's shapes
_LLAMA_3_70B_TP4 = dict(model="llama-3.3-70b", tensor_parallel_size=4)  # Llama-3-70B's shapes

PUBLISHED_MD = Group(
    "published", "vLLM, NIM and TensorRT-LLM serving, as their publishers measured it",
    ("L1-L5: vLLM performance benchmark, nightly 'Latency tests' (vllm-project/vllm "
     ".buildkite/nightly-benchmarks/tests/latency-tests.json), vLLM V0, late 2024, dummy "
     "weights, mean of 15 runs",
     "N1-N5: NVIDIA NIM benchmarking guide, 'Performance' (docs.nvidia.com/nim/benchmarking/llm), "
     "NIM 1.8.0; ITL compared with servesim's mean TPOT",
     "T1-T6: NVIDIA/TensorRT-LLM docs/source/performance.md, 'Low Latency' tables, v0.9.0 "
     "(LLaMA 7B and 70B are Llama 2)"),
    (
        # vLLM nightly "Latency tests": batch 8, 32 in / 128 out.
        _batch_latency("L1", "Llama-3-8B BF16, 1x A100, batch of 8: latency", 1585.43,
                       gpu="a100-80gb", **_LLAMA_3_8B),
        _batch_latency("L2", "Llama-3-8B BF16, 1x H100, batch of 8: latency", 997.54,
                       gpu="h100-sxm5", **_LLAMA_3_8B),
        _batch_latency("L3", "Llama-3-8B BF16, 1x H200, batch of 8: latency", 833.42,
                       gpu="h200", **_LLAMA_3_8B),
        _batch_latency("L4", "Llama-3-70B BF16, 4x H100, batch of 8: latency", 2444.47,
                       gpu="h100-sxm5", **_LLAMA_3_70B_TP4),
        _batch_latency("L5", "Llama-3-70B BF16, 4x H200, batch of 8: latency", 2077.53,
                       gpu="h200", **_LLAMA_3_70B_TP4),
        # NIM 1.8.0, Llama-3.3-70B FP8 on 2 x H100.
        _nim("N1", "70B FP8, 2x H100, 5,000/500, 1 client: TTFT", 406.77, "ms", "mean_ttft_ms",
             5000, 500, concurrency=1, num_prompts=5),
        _nim("N2", "70B FP8, 2x H100, 5,000/500, 1 client: ITL", 18.58, "ms", "mean_tpot_ms",
             5000, 500, concurrency=1, num_prompts=5),
        _nim("N3", "70B FP8, 2x H100, 5,000/500, 25 clients: ITL", 38.75, "ms", "mean_tpot_ms",
             5000, 500, concurrency=25, num_prompts=125),
        _nim("N4", "70B FP8, 2x H100, 5,000/500, 50 clients: output", 814.37, "tok/s",
             "output_throughput", 5000, 500, concurrency=50, num_prompts=250),
        _nim("N5", "70B FP8, 2x H100, 500/2,000, 1 client: TTFT", 47.77, "ms", "mean_ttft_ms",
             500, 2000, concurrency=1, num_prompts=3),
        # TensorRT-LLM 0.9.0, batch 1, first-token latency.
        _first_token("T1", "Llama-2-7B FP16, 1x A100, 128-token prompt: TTFT", 16.2, 128,
                     model="llama-2-7b", gpu="a100-80gb"),
        _first_token("T2", "Llama-2-7B FP16, 1x A100, 2,048-token prompt: TTFT", 132.4, 2048,
                     model="llama-2-7b", gpu="a100-80gb"),
        _first_token("T3", "Llama-2-70B FP8, 4x H100, 128-token prompt: TTFT", 19.6, 128,
                     model="llama-2-70b-fp8", gpu="h100-sxm5", tensor_parallel_size=4),
        _first_token("T4", "Llama-2-70B FP8, 8x H100, 2,048-token prompt: TTFT", 85.1, 2048,
                     model="llama-2-70b-fp8", gpu="h100-sxm5", tensor_parallel_size=8),
        _first_token("T5", "Llama-2-70B FP8, 4x H200, 2,048-token prompt: TTFT", 103.0, 2048,
                     model="llama-2-70b-fp8", gpu="h200", tensor_parallel_size=4),
        _first_token("T6", "Llama-2-70B FP16, 8x A100, 2,048-token prompt: TTFT", 249.2, 2048,
                     model="llama-2-70b", gpu="a100-80gb", tensor_parallel_size=8),
    ),
    max_median_abs_ln=0.15, max_worst_abs_ln=0.40)


def _offline(id_: str, what: str, published_tok_s: float, **engine) -> Measurement:
    """1,000-token prompts for 1,000-token answers, 256 sent at once, on as much KV as one
    H100 can give (utilization 0.95, FP8 KV)."""
    setup = dict(model="llama-3.3-70b-fp8", gpu_memory_utilization=0.95, kv_cache_dtype="fp8",
                 max_model_len=2048, max_num_batched_tokens=8192)
    return Measurement(id_, what, published_tok_s, "tok/s", "output_throughput",
                       dict(setup, **engine), mode="chunked",
                       workload=dict(input_len=1000, output_len=1000, num_prompts=256))


THROUGHPUT = Group(
    "throughput", "TensorRT-LLM offline throughput, Llama-3.3-70B FP8, 1,000 in / 1,000 out",
    ("C1-C3: NVIDIA/TensorRT-LLM performance overview (docs/source/performance/perf-overview.md), "
     "all requests sent at once",),
    (
        _offline("C1", "70B FP8, 1x H100: output", 715, gpu="h100-sxm5"),
        _offline("C2", "70B FP8, 1x H200: output", 2875, gpu="h200"),
        _offline("C3", "70B FP8, 2x H100: output", 4224, gpu="h100-sxm5", tensor_parallel_size=2),
    ),
    ratio_band=(0.65, 1.35))

KV_CAPACITY = Group(
    "kv", "the KV capacity vLLM logged for the lesson's setup",
    ("K1: vLLM's start-up log for Llama-3.3-70B FP8 on one H100 SXM5, utilization 0.95, FP8 KV: "
     "'5.11 GiB' of KV cache, '33,504 tokens' (see code/gpu_memory.py)",),
    (
        Measurement("K1", "70B FP8, 1x H100, utilization 0.95, FP8 KV: KV cache",
                    33504, "tokens", "kv_cache_tokens",
                    dict(model="llama-3.3-70b-fp8", gpu="h100-sxm5", gpu_memory_utilization=0.95,
                         kv_cache_dtype="fp8", max_model_len=2048,
                         max_num_batched_tokens=8192)),  # vllm serve's budget on an H100
    ),
    ratio_band=(0.90, 1.10))

# Mixture-of-Experts rows (commands/calibration_moe.py), and a set kept aside.
MOE = Group("moe", "MoE serving: TensorRT-LLM on H200 (DP+EP), vLLM's Mixtral latency",
            MOE_SOURCES, tuple(Measurement(**row) for row in MOE_ROWS), max_median_abs_ln=0.25)
MOE_ASIDE = Group("moe-aside", "MoE serving kept aside: TensorRT-LLM on H100 (DP+EP)",
                  MOE_ASIDE_SOURCES, tuple(Measurement(**row) for row in MOE_ASIDE_ROWS),
                  max_median_abs_ln=0.25)

GROUPS = (PUBLISHED_MD, THROUGHPUT, KV_CAPACITY, MOE, MOE_ASIDE)


@dataclass(frozen=True)
class Comparison:
    measurement: Measurement
    servesim: float

    @property
    def ratio(self) -> float:
        return self.servesim / self.measurement.published

    @property
    def abs_ln_ratio(self) -> float:
        return abs(math.log(self.ratio))


def servesim_figure(measurement: Measurement, simulate) -> float:
    """The figure servesim gives for a measurement's setup: a run's result, or the KV pool."""
    config = measurement.config()
    plan = plan_memory(config)
    if measurement.result_field == "kv_cache_tokens":
        return plan.kv_cache_tokens
    result = simulate(measurement.make_workload(), MODES[measurement.mode], config,
                      plan.num_gpu_blocks, RooflineClock(config)).summary()
    if measurement.result_field == "duration_ms":
        return 1000 * result["duration"]
    return result[measurement.result_field]


def compare_group(group: Group, simulate) -> list[Comparison]:
    return [Comparison(m, servesim_figure(m, simulate)) for m in group.measurements]


def median_abs_ln(comparisons: list[Comparison]) -> float:
    return statistics.median(c.abs_ln_ratio for c in comparisons)


def worst(comparisons: list[Comparison]) -> Comparison:
    return max(comparisons, key=lambda c: c.abs_ln_ratio)


def meets_goal(group: Group, comparisons: list[Comparison]) -> bool:
    """Whether the group's comparisons are within every goal the group sets."""
    if group.max_median_abs_ln is not None and median_abs_ln(comparisons) > group.max_median_abs_ln:
        return False
    if group.max_worst_abs_ln is not None and worst(comparisons).abs_ln_ratio > group.max_worst_abs_ln:
        return False
    if group.ratio_band is not None:
        low, high = group.ratio_band
        return all(low <= c.ratio <= high for c in comparisons)
    return True


def goal_text(group: Group) -> str:
    goals = []
    if group.max_median_abs_ln is not None:
        goals.append(f"median |ln ratio| <= {group.max_median_abs_ln:.2f}")
    if group.max_worst_abs_ln is not None:
        goals.append(f"worst <= {group.max_worst_abs_ln:.2f}")
    if group.ratio_band is not None:
        goals.append(f"every ratio in {group.ratio_band[0]:.2f}-{group.ratio_band[1]:.2f}")
    return ", ".join(goals)


# -- the report -------------------------------------------------------------------------------

COLUMNS = ("id", "measurement", "unit", "published", "servesim", "ratio", "|ln ratio|")


def report_lines(results: list[tuple[Group, list[Comparison]]]) -> list[str]:
    lines = ["servesim calibration: the roofline clock against published measurements",
             "ratio = servesim / published (below 1: a time came out shorter, a throughput "
             "lower); |ln ratio| 0.10 is about 10% either way", ""]
    for group, comparisons in results:
        lines.append(f"{group.name}: {group.title}")
        lines += _table(comparisons)
        lines.append(_verdict(group, comparisons))
        lines += [textwrap.fill(source, width=100, initial_indent="  ", subsequent_indent="    ",
                                break_on_hyphens=False)
                  for source in group.sources]
        lines.append("")
    return lines[:-1]


def _table(comparisons: list[Comparison]) -> list[str]:
    rows = [COLUMNS] + [(c.measurement.id, c.measurement.what, c.measurement.unit,
                         _figure(c.measurement.published), _figure(c.servesim), f"{c.ratio:.2f}",
                         f"{c.abs_ln_ratio:.3f}") for c in comparisons]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for row in rows:
        cells = [cell.ljust(w) if i < 3 else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def _figure(value: float) -> str:
    """Four significant figures or more, with thousands separators."""
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def _verdict(group: Group, comparisons: list[Comparison]) -> str:
    worst_one = worst(comparisons)
    met = "met" if meets_goal(group, comparisons) else "NOT met"
    return (f"median |ln ratio| {median_abs_ln(comparisons):.3f}, worst {worst_one.abs_ln_ratio:.3f}"
            f" ({worst_one.measurement.id}); goal: {goal_text(group)}: {met}")


def to_json(results: list[tuple[Group, list[Comparison]]]) -> dict:
    return {"groups": [{
        "name": group.name, "title": group.title, "goal": goal_text(group),
        "goal_met": meets_goal(group, comparisons),
        "median_abs_ln_ratio": median_abs_ln(comparisons),
        "worst_abs_ln_ratio": worst(comparisons).abs_ln_ratio,
        "worst_id": worst(comparisons).measurement.id,
        "sources": list(group.sources),
        "rows": [{"id": c.measurement.id, "measurement": c.measurement.what,
                  "unit": c.measurement.unit, "published": c.measurement.published,
                  "servesim": c.servesim, "ratio": c.ratio,
                  "run_flags": c.measurement.flags()} for c in comparisons],
    } for group, comparisons in results]}


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "calibration", help="the virtual clock against published measurements",
        description="Replay published measurements of vLLM, NIM and TensorRT-LLM on real GPUs and "
                    "print, per row: the published figure, servesim's under the same model, GPU "
                    "and workload (units in the unit column), ratio = servesim / published and "
                    "|ln ratio|; per group the median and worst |ln ratio| against the goal.")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.set_defaults(command=run_calibration)


def run_calibration(args, context) -> str:
    results = [(group, compare_group(group, context.simulate)) for group in GROUPS]
    if args.format == "json":
        return json.dumps(to_json(results), indent=2, allow_nan=False)
    return "\n".join(report_lines(results))
