"""The rows `calibration` replays: each published measurement, its source, and the servesim
setup that reproduces it (calibration.py serves each and compares).

    published      16 measurements of vLLM, NIM and TensorRT-LLM serving
    throughput     TensorRT-LLM's offline throughput for Llama-3.3-70B FP8
    kv             the KV capacity vLLM logged for the lesson's setup
    kept-aside     vLLM on H100, H200 and MI300X, no constant of the clock fixed on them
    moe, moe-aside Mixture-of-Experts serving (their tables in calibration_moe.py)

The figures are data copied from the sources named beside them; `Measurement.flags()` is the
`python code/main.py run` command line that reproduces a row on its own.
"""

import json
from dataclasses import dataclass, field
from typing import Optional

from commands.calibration_moe import MOE_ASIDE_ROWS, MOE_ASIDE_SOURCES, MOE_ROWS, MOE_SOURCES
from config import EngineConfig
from engine_overhead import VERSIONS
from presets import GPUS
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
    engine: dict         # EngineConfig fields that differ from the defaults; vllm_version is
    #                      the version the row ran (vLLM rows) or the one it replays under
    ran_on: str          # the engine and version that measured it, as its source says
    mode: str = "continuous"
    workload: dict = field(default_factory=dict)  # random_workload arguments (all sent at t=0)
    baseline: Optional[dict] = None  # a ratio row: the engine fields of the run it divides by
    #                                  (same workload); `published` is then a ratio too

    def config(self) -> EngineConfig:
        return EngineConfig(**self.engine)

    @property
    def vendor(self) -> str:
        return GPUS[self.config().gpu].vendor

    @property
    def generation(self) -> str:
        """The engine generation the row measured: vLLM V0 / V1, or another engine by name."""
        if self.ran_on.startswith("vLLM"):
            return f"vLLM {VERSIONS[self.config().vllm_version].generation}"
        return self.ran_on.split()[0]

    def make_workload(self):
        return random_workload(self.workload["input_len"], self.workload["output_len"], 0.0,
                               num_prompts=self.workload["num_prompts"],
                               max_concurrency=self.workload.get("max_concurrency"))

    def flags(self) -> str:
        """The `python code/main.py run` flags that reproduce this measurement's setup."""
        defaults = EngineConfig()
        parts = [f"--mode {self.mode}"]
        # --max-model-len's default follows the model (its max_position_embeddings): said
        # whenever a row sets it.
        parts += [_flag(name, value) for name, value in self.engine.items()
                  if value != getattr(defaults, name) or name == "max_model_len"]
        if self.workload:
            parts.append("--dataset-name random")
            parts += [f"{flag} {self.workload[key]}" for key, flag in RANDOM_WORKLOAD_FLAGS.items()
                      if key in self.workload]
        return " ".join(parts)


def _flag(name: str, value) -> str:
    """An EngineConfig field as its flag: `--max-model-len 4096`, `--no-async-scheduling`."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


@dataclass(frozen=True)
class Group:
    name: str
    title: str
    sources: tuple[str, ...]          # one line per source, printed under the group's table
    measurements: tuple[Measurement, ...]
    max_median_abs_ln: Optional[float] = None  # goal on the median |ln ratio|, if any
    max_worst_abs_ln: Optional[float] = None   # goal on the worst |ln ratio|, if any
    ratio_band: Optional[tuple[float, float]] = None  # goal on every ratio, if any


# vLLM's nightly benchmarks of late 2024 ran the V0 engine of the 0.6 line (V1 became the default
# in 0.8.0, 2025): replayed with V0's CPU costs, synchronously.
VLLM_V0 = dict(vllm_version="0.6", async_scheduling=False)


def _batch_latency(id_: str, what: str, published_ms: float, **engine) -> Measurement:
    """vLLM's benchmark_latency: 8 prompts of 32 tokens, 128 output tokens each, sent at once;
    the figure is the whole batch's latency, servesim's duration."""
    return Measurement(id_, what, published_ms, "ms", "duration_ms", dict(engine, **VLLM_V0),
                       "vLLM 0.6 (V0)", workload=dict(input_len=32, output_len=128, num_prompts=8))


def _nim(id_: str, what: str, published: float, unit: str, result_field: str, input_len: int,
         output_len: int, concurrency: int, num_prompts: int) -> Measurement:
    """NVIDIA NIM (TensorRT-LLM) on 2 x H100, Llama-3.3-70B FP8 with FP8 KV, genai-perf at a
    constant concurrency; servesim's chunked scheduler with NIM's 8,192-token step budget."""
    engine = dict(model="llama-3.3-70b-fp8", gpu="h100-sxm5", tensor_parallel_size=2,
                  kv_cache_dtype="fp8", max_num_batched_tokens=8192)
    return Measurement(id_, what, published, unit, result_field, engine, "NIM 1.8.0 "
                       "(TensorRT-LLM)", mode="chunked",
                       workload=dict(input_len=input_len, output_len=output_len,
                                     num_prompts=num_prompts, max_concurrency=concurrency))


def _first_token(id_: str, what: str, published_ms: float, prompt_len: int,
                 **engine) -> Measurement:
    """TensorRT-LLM's gptSessionBenchmark at batch 1 with one output token: the prefill alone."""
    return Measurement(id_, what, published_ms, "ms", "mean_ttft_ms",
                       dict(engine, max_model_len=4096), "TensorRT-LLM 0.9.0",
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
     "Rows of TensorRT-LLM and NIM replay under vLLM 0.30.0's CPU model: their C++ runtime's "
     "own work per step is small and runs beside the GPU's, as async scheduling's does",
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
    max_median_abs_ln=0.10, max_worst_abs_ln=0.25)


def _offline(id_: str, what: str, published_tok_s: float, **engine) -> Measurement:
    """1,000-token prompts for 1,000-token answers, 256 sent at once, on as much KV as one
    H100 can give (utilization 0.95, FP8 KV)."""
    setup = dict(model="llama-3.3-70b-fp8", gpu_memory_utilization=0.95, kv_cache_dtype="fp8",
                 max_model_len=2048, max_num_batched_tokens=8192)
    return Measurement(id_, what, published_tok_s, "tok/s", "output_throughput",
                       dict(setup, **engine), "TensorRT-LLM (perf-overview)", mode="chunked",
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
                         max_num_batched_tokens=8192),  # vllm serve's budget on an H100
                    "vLLM 0.30.0 (V1)"),
    ),
    ratio_band=(0.90, 1.10))

# Kept aside: measurements no constant of the clock was fixed on. The Azure AI benchmarking
# guide's vLLM throughput tables (github.com/samuel-bohman/AI-benchmarking-guide,
# Azure_Results/ND_H100_v5_results.md, ND_H200_v5_results.md, ND_MI300X_v5_results.md; MIT
# licence): Llama-3.1-8B FP8 on one GPU and Llama-3.1-70B FP8 at TP 8, 1,000 requests at once, six
# prompt/output lengths, "throughput (tokens/sec)". Their unit is ambiguous (total or output
# tokens), and it cancels in a ratio between GPUs of the same table: each row is one GPU's
# throughput over the H100's on the same workload. PyTorch 2.4.0 in the NVIDIA files places them
# in vLLM 0.5.4-0.6.3 (V0); the MI300X file names ROCm's build of the same period.
AZURE_WORKLOADS = ((128, 128), (128, 1024), (128, 2048), (500, 2000), (1024, 1024), (2048, 2048))
AZURE_TOK_S = {  # (gpu, model) -> throughput per workload above, as published
    ("h100-sxm5", "8b"): (15163, 17075, 15014, 13047, 11724, 8026),
    ("h100-sxm5", "70b"): (10032, 13345, 12910, 11594, 9125, 7908),
    ("h200", "8b"): (17853, 23880, 21255, 18357, 15043, 9736),
    ("h200", "70b"): (11973, 18369, 18219, 15911, 11302, 10371),
    ("mi300x", "8b"): (18149, 19579, 16394, 13559, 10995, 7356),
    ("mi300x", "70b"): (9026, 12461, 12204, 10877, 8256, 7421),
}
AZURE_MODELS = {"8b": dict(model="llama-3.1-8b-fp8", tensor_parallel_size=1),
                "70b": dict(model="llama-3.3-70b-fp8", tensor_parallel_size=8)}
AZURE_GPU_NAMES = {"h200": "H200", "mi300x": "MI300X"}
AZURE_ID_LETTERS = {"h200": "H", "mi300x": "M"}  # row ids: H8-1 ... M70-6


def _azure_ratio(gpu: str, model: str, index: int) -> Measurement:
    """One GPU's vLLM throughput over the H100's, same model and workload (V0's chunked prefill
    with an 8,192-token budget, as `LLM` ran long-context models)."""
    input_len, output_len = AZURE_WORKLOADS[index]
    setup = dict(AZURE_MODELS[model], max_model_len=4096, max_num_batched_tokens=8192, **VLLM_V0)
    published = AZURE_TOK_S[gpu, model][index] / AZURE_TOK_S["h100-sxm5", model][index]
    return Measurement(
        f"{AZURE_ID_LETTERS[gpu]}{model[:-1]}-{index + 1}",
        f"{AZURE_GPU_NAMES[gpu]} / H100, {model.upper()} FP8, {input_len}/{output_len}",
        published, "x", "total_token_throughput", dict(setup, gpu=gpu), "vLLM 0.6 (V0)",
        mode="chunked", baseline=dict(setup, gpu="h100-sxm5"),
        workload=dict(input_len=input_len, output_len=output_len, num_prompts=1000))


# Oracle's OCI blog "Serving Llama 3.1 405B model with AMD MI300X GPUs" (blogs.oracle.com/
# cloud-infrastructure, 2024): vLLM's benchmark_latency on 8 x MI300X, Llama 3.1 405B FP8, 128
# tokens in and out, the whole batch's average latency at batch 1-256. vLLM's ROCm build of 2024:
# V0.
ORACLE_405B_S = ((1, 3.530), (2, 3.583), (4, 3.734), (8, 3.974), (16, 4.375), (32, 5.130),
                 (64, 6.919), (128, 10.340), (256, 17.750))


def _oracle_latency(batch: int, published_s: float) -> Measurement:
    return Measurement(
        f"O{batch}", f"405B FP8, 8x MI300X, batch of {batch}, 128/128: latency",
        1000 * published_s, "ms", "duration_ms",
        dict(model="llama-3.1-405b-fp8", gpu="mi300x", tensor_parallel_size=8,
             max_model_len=4096, **VLLM_V0), "vLLM 0.6 (V0, ROCm)",
        workload=dict(input_len=128, output_len=128, num_prompts=batch))


KEPT_ASIDE = Group(
    "kept-aside", "vLLM on H100, H200 and MI300X (no constant was fixed on these)",
    ("H8-*, H70-*, M8-*, M70-*: Azure AI benchmarking guide, Azure_Results/ND_{H100,H200,MI300X}"
     "_v5_results.md, vLLM tables (1,000 requests); ratio = servesim's GPU/H100 over the "
     "published GPU/H100",
     "O1-O256: Oracle Cloud Infrastructure blog, 'Serving Llama 3.1 405B model with AMD MI300X "
     "GPUs' (2024), vLLM benchmark_latency, 128/128"),
    tuple(_azure_ratio(gpu, model, index) for gpu in AZURE_GPU_NAMES for model in AZURE_MODELS
          for index in range(len(AZURE_WORKLOADS)))
    + tuple(_oracle_latency(batch, published_s) for batch, published_s in ORACLE_405B_S),
    max_median_abs_ln=0.15, max_worst_abs_ln=0.40)

# Mixture-of-Experts rows (commands/calibration_moe.py), and a set kept aside.
MOE = Group("moe", "MoE serving: TensorRT-LLM on H200 (DP+EP), vLLM's Mixtral latency",
            MOE_SOURCES, tuple(Measurement(**row) for row in MOE_ROWS), max_median_abs_ln=0.25)
MOE_ASIDE = Group("moe-aside", "MoE serving kept aside: TensorRT-LLM on H100 (DP+EP)",
                  MOE_ASIDE_SOURCES, tuple(Measurement(**row) for row in MOE_ASIDE_ROWS),
                  max_median_abs_ln=0.25)

GROUPS = (PUBLISHED_MD, THROUGHPUT, KV_CAPACITY, KEPT_ASIDE, MOE, MOE_ASIDE)
