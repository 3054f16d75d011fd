"""Published Mixture-of-Experts serving measurements, as rows for `calibration` (calibration.py
turns each into a Measurement and each table into a Group).

Two sets, from different GPUs, neither used to fix any constant of the clock (every constant in
forward_model.py was fixed on the dense rows before these were added):

    moe        TensorRT-LLM's offline throughput on 8 x H200 (Qwen3-235B-A22B FP8) and 4 x H200
               (Llama-4-Scout FP8), and vLLM's batch latency of Mixtral-8x7B on 2 x H200
    moe-aside  the same TensorRT-LLM tables on H100s, kept aside: the check that the MoE clock
               carries to another GPU

TensorRT-LLM ran its MoE models with attention data parallelism and expert parallelism
(`enable_attention_dp: true`, `--ep`): servesim runs them as `--data-parallel-size N
--enable-expert-parallel`, with TensorRT-LLM's per-rank defaults (max_batch_size 2048,
max_num_tokens 8192) times the N ranks, and its `--kv_cache_free_gpu_mem_fraction 0.95` as the
utilization. It sent 1,000-30,000 requests of fixed lengths at once; servesim replays the first
1,000 of them (enough to fill every rank's batch; fewer runs quicker and keeps the suite short).
"""

MAX_REPLAYED_REQUESTS = 1000

# TensorRT-LLM's request counts per (input, output) length (perf-overview.md, "Preparing a Dataset").
TRTLLM_NUM_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500,
                       (500, 2000): 3000, (1000, 1000): 3000, (1000, 2000): 1500,
                       (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500,
                       (20000, 2000): 1000}

TRTLLM_SOURCE = ("NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md (v1.0, PyTorch "
                 "backend, trtllm-bench throughput): Total Output Throughput (tokens/sec), "
                 "ModelOpt FP8 checkpoints, attention DP + EP for MoE models")
VLLM_SOURCE = ("vLLM performance benchmark, nightly 'Latency tests' (buildkite.com/vllm/"
               "performance-benchmark, build 9515): latency_mixtral8x7B_tp2 on H200, batch 8, "
               "32 in / 128 out, mean latency")

# (model, gpu, ranks, extra engine fields) -> {(input, output): published output tok/s}
TRTLLM_TABLES = {
    ("qwen3-235b-a22b-fp8", "h200", 8, ()): {
        (128, 128): 30429, (128, 2048): 42821, (128, 4096): 26852, (500, 2000): 28026,
        (1000, 1000): 23789, (1000, 2000): 22061, (2048, 128): 3331, (2048, 2048): 16672,
        (5000, 500): 3623, (20000, 2000): 1876},
    ("llama-4-scout", "h200", 4, (("quantization", "fp8"),)): {
        (128, 128): 30354, (128, 2048): 34316, (128, 4096): 21332, (500, 2000): 24630,
        (1000, 1000): 21636, (1000, 2000): 18499, (2048, 128): 3699, (2048, 2048): 14949,
        (5000, 500): 4605, (20000, 2000): 2105},
}
TRTLLM_ASIDE_TABLES = {
    ("qwen3-235b-a22b-fp8", "h100-sxm5", 8, ()): {
        (128, 2048): 19658, (128, 4096): 12447, (500, 2000): 18351, (1000, 1000): 14898,
        (1000, 2000): 15136, (2048, 2048): 9924, (5000, 500): 3225},
    ("llama-4-scout", "h100-sxm5", 4, (("quantization", "fp8"),)): {
        (128, 2048): 15130, (128, 4096): 8603, (500, 2000): 12399, (1000, 1000): 12129,
        (1000, 2000): 9838, (2048, 128): 3253, (2048, 2048): 7972, (5000, 500): 3342},
}
SHORT_NAMES = {"qwen3-235b-a22b-fp8": "Qwen3-235B FP8", "llama-4-scout": "Scout FP8",
               "h200": "H200", "h100-sxm5": "H100"}


def trtllm_rows(prefix: str, tables: dict) -> list[dict]:
    """Measurement fields of every cell of `tables`, ids prefix1, prefix2, ..."""
    rows = []
    for (model, gpu, ranks, extra), cells in tables.items():
        for (input_len, output_len), published in cells.items():
            engine = dict(model=model, gpu=gpu, data_parallel_size=ranks,
                          enable_expert_parallel=True, gpu_memory_utilization=0.95,
                          max_model_len=input_len + output_len, max_num_seqs=2048 * ranks,
                          max_num_batched_tokens=8192 * ranks, **dict(extra))
            num_prompts = min(TRTLLM_NUM_REQUESTS[(input_len, output_len)],
                              MAX_REPLAYED_REQUESTS)
            rows.append(dict(
                id=f"{prefix}{len(rows) + 1}",
                what=(f"{SHORT_NAMES[model]}, {ranks}x {SHORT_NAMES[gpu]} DP+EP, "
                      f"{input_len:,}/{output_len:,}: output"),
                published=published, unit="tok/s", result_field="output_throughput",
                engine=engine, mode="chunked",
                workload=dict(input_len=input_len, output_len=output_len,
                              num_prompts=num_prompts)))
    return rows


MIXTRAL_LATENCY_ROW = dict(
    id="M0", what="Mixtral-8x7B BF16, 2x H200 TP2, batch of 8: latency", published=1917.44,
    unit="ms", result_field="duration_ms",
    engine=dict(model="mixtral-8x7b", gpu="h200", tensor_parallel_size=2, max_model_len=8192),
    mode="continuous", workload=dict(input_len=32, output_len=128, num_prompts=8))

MOE_ROWS = [MIXTRAL_LATENCY_ROW] + trtllm_rows("M", TRTLLM_TABLES)
MOE_ASIDE_ROWS = trtllm_rows("A", TRTLLM_ASIDE_TABLES)
MOE_SOURCES = ("M0: " + VLLM_SOURCE, "M1-M20: " + TRTLLM_SOURCE + "; H200 tables")
MOE_ASIDE_SOURCES = ("A1-A15: " + TRTLLM_SOURCE + "; H100 tables, kept aside",)
