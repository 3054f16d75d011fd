"""Offline throughput lands in the band of published results for another engine (TensorRT-LLM).

NVIDIA's TensorRT-LLM performance overview reports, for Llama-3.3-70B FP8 with 1,000-token
prompts and 1,000-token outputs, all requests sent at once: about 715 output tok/s on one H100,
2,875 on one H200 and 4,224 on two H100s (TP2). A different engine, so a band, not a match.
"""

from dataclasses import replace

import pytest

from config import EngineConfig
from forward_model import make_clock
from gpu_memory import plan_memory
from main import simulate
from modes import MODES
from workload import random_workload

NVIDIA_SETUP = EngineConfig(model="llama-3.3-70b-fp8", gpu="h100-sxm5", gpu_memory_utilization=0.95,
                            kv_cache_dtype="fp8", max_model_len=2048, max_num_batched_tokens=8192)


@pytest.mark.parametrize("gpu, tp, published_tok_s", [
    ("h100-sxm5", 1, 715), ("h200", 1, 2875), ("h100-sxm5", 2, 4224)])
def test_offline_throughput_is_within_2x_of_published(gpu, tp, published_tok_s):
    config = replace(NVIDIA_SETUP, gpu=gpu, tensor_parallel_size=tp)
    workload = random_workload(1000, 1000, 0.0, num_prompts=256)
    summary = simulate(workload, MODES["chunked"], config, plan_memory(config).num_gpu_blocks,
                       make_clock(config)).summary()
    assert 0.5 < summary["output_throughput"] / published_tok_s < 2.0
