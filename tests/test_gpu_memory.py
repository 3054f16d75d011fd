"""KV capacity the way vLLM computes it: utilization x memory - weights - activation reserve."""

import pytest

from config import ConfigError, EngineConfig
from gpu_memory import GIB, plan_memory


def test_lesson_model_on_one_h100_lands_near_what_vllm_printed():
    # vLLM, Llama-3.3-70B FP8 on one H100 SXM5, utilization 0.95, FP8 KV: 5.11 GiB, 33,504 tokens.
    plan = plan_memory(EngineConfig(model="llama-3.3-70b-fp8", gpu="h100-sxm5",
                                    gpu_memory_utilization=0.95, kv_cache_dtype="fp8",
                                    max_model_len=2048))
    assert plan.kv_cache_bytes / GIB == pytest.approx(5.11, rel=0.02)
    assert plan.kv_cache_tokens == pytest.approx(33_504, rel=0.02)


def test_fp8_kv_holds_about_twice_the_tokens_of_16_bit_kv():
    auto = plan_memory(EngineConfig(gpu="h200", kv_cache_dtype="auto"))
    fp8 = plan_memory(EngineConfig(gpu="h200", kv_cache_dtype="fp8"))
    assert fp8.kv_cache_tokens == pytest.approx(2 * auto.kv_cache_tokens, rel=0.001)


def test_tensor_parallelism_splits_the_weights_and_frees_room_for_kv():
    one = plan_memory(EngineConfig(gpu="h100-sxm5", gpu_memory_utilization=0.95,
                                   kv_cache_dtype="fp8", max_model_len=2048))
    two = plan_memory(EngineConfig(gpu="h100-sxm5", gpu_memory_utilization=0.95,
                                   kv_cache_dtype="fp8", max_model_len=2048,
                                   tensor_parallel_size=2))
    assert two.weight_bytes == one.weight_bytes // 2
    assert two.kv_cache_tokens > 10 * one.kv_cache_tokens


def test_weights_that_do_not_fit_are_refused_with_what_would_fit():
    with pytest.raises(ConfigError) as refused:
        plan_memory(EngineConfig(model="llama-3.3-70b", gpu="h100-sxm5"))
    message = str(refused.value)
    assert "131.4 GiB of weights" in message
    assert "--tensor-parallel-size 2" in message


def test_num_gpu_blocks_override_wins():
    plan = plan_memory(EngineConfig(num_gpu_blocks_override=600, block_size=16))
    assert (plan.num_gpu_blocks, plan.kv_cache_tokens) == (600, 9600)
