"""KV capacity the way vLLM computes it: utilization x memory - weights - activation reserve."""

import re
from dataclasses import replace

import pytest

from config import ConfigError, EngineConfig
from gpu_memory import GIB, plan_memory


def test_lesson_model_on_one_h100_lands_near_what_vllm_printed():
    # vLLM, Llama-3.3-70B FP8 on one H100 SXM5, utilization 0.95, FP8 KV: 5.11 GiB, 33,504 tokens
    # (vllm serve's budget there: 8,192 tokens, which its profiling pass runs).
    plan = plan_memory(EngineConfig(model="llama-3.3-70b-fp8", gpu="h100-sxm5",
                                    gpu_memory_utilization=0.95, kv_cache_dtype="fp8",
                                    max_model_len=2048, max_num_batched_tokens=8192))
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


def advised_changes(message: str) -> list[dict]:
    """'...; any one of these fits: --max-model-len 3824, --gpu h200 (or b200, mi300x)' ->
    [{"max_model_len": 3824}, {"gpu": "h200"}, {"gpu": "b200"}, {"gpu": "mi300x"}]."""
    changes = []
    for flag, value, others in re.findall(r"(--[\w-]+) ([^\s,()]+)(?: \(or ([^)]*)\))?",
                                          message.split("any one of these fits: ")[1]):
        field = flag[2:].replace("-", "_")
        for text in [value] + (others.split(", ") if others else []):
            number = float(text) if "." in text else int(text) if text.isdigit() else text
            changes.append({field: number})
    return changes


REFUSED = [dict(gpu="h100-sxm5"), dict(gpu="l4"), dict(model="llama-3.3-70b", gpu="h100-sxm5"),
           dict(num_gpu_blocks_override=10), dict(block_size=2**20), dict(max_num_seqs=10**6),
           dict(model="llama-3.2-1b", tensor_parallel_size=8, kv_cache_dtype="fp8"),
           dict(max_model_len=10**6), dict(gpu_memory_utilization=0.01),
           dict(model="llama-3.1-405b-fp8", gpu="h100-sxm5", tensor_parallel_size=4),
           dict(max_num_batched_tokens=10**7), dict(model="opt-13b", gpu="l4", block_size=4096)]


@pytest.mark.parametrize("changes", REFUSED)
def test_every_change_a_refusal_advises_is_itself_a_config_that_fits(changes):
    config = EngineConfig(**changes)
    config.validate()
    with pytest.raises(ConfigError) as refused:
        plan_memory(config)
    advice = advised_changes(str(refused.value))
    assert advice, str(refused.value)
    for change in advice:
        advised = replace(config, **change)
        advised.validate()
        assert plan_memory(advised).kv_cache_tokens >= advised.max_model_len, change


def test_when_no_one_change_fits_the_refusal_says_so_rather_than_guess():
    with pytest.raises(ConfigError, match="no change of one setting servesim can suggest makes "
                                          "it fit$"):
        plan_memory(EngineConfig(gpu="a100-40gb", max_model_len=10**6))


def test_at_the_largest_tensor_parallel_degree_no_larger_one_is_advised():
    # The old advice doubled the degree up to 8 and then suggested 8 again, at 8.
    config = EngineConfig(model="llama-3.1-405b-fp8", gpu="l4", tensor_parallel_size=8)
    with pytest.raises(ConfigError) as refused:
        plan_memory(config)
    assert "--tensor-parallel-size 8" not in str(refused.value)
    assert "--tensor-parallel-size 32" in str(refused.value)  # 381.9 GiB / 32 fits in 19.8 GiB


def test_with_more_gpus_than_kv_heads_each_gpu_keeps_one_head_of_kv():
    # Llama 3 70B has 8 KV heads: at TP 16 every GPU still holds one head's KV (vLLM replicates).
    from presets import MODELS
    model = MODELS["llama-3.3-70b-fp8"]
    one_head = model.kv_bytes_per_token("auto") // 8
    assert model.kv_bytes_per_token_per_gpu("auto", 8) == one_head
    assert model.kv_bytes_per_token_per_gpu("auto", 16) == one_head
    assert model.kv_bytes_per_token_per_gpu("auto", 2) == 4 * one_head


def test_at_long_context_the_pool_lands_near_what_vllm_logged():
    # vLLM 0.19.0 (V1), `vllm serve openai/gpt-oss-20b --max-model-len 131072
    # --gpu-memory-utilization 0.65` on an A100 80GB (its budget there: 2,048 tokens): "Model
    # loading took 13.72 GiB", "Available KV cache memory: 36.56 GiB" (the start-up log posted at
    # myoceane.fr, "[AI] vLLM 部署地端模型系統訊息記錄 A100", April 2026).
    plan = plan_memory(EngineConfig(model="gpt-oss-20b", gpu="a100-80gb", max_model_len=131072,
                                    gpu_memory_utilization=0.65, max_num_batched_tokens=2048),
                       enable_chunked_prefill=True)
    available = plan.usable_bytes - plan.weight_bytes - plan.activation_reserve_bytes
    assert available / GIB == pytest.approx(36.56, rel=0.10)


def test_the_profiling_pass_is_sized_by_the_budget_not_by_max_model_len():
    # Llama-3.1-8B at its full 131,072-token context with an 8,192-token budget: vLLM V1
    # profiles 8,192 tokens (GPUModelRunner.profile_run), about 0.7 GiB of MLP activations,
    # where 131,072 would take 10.5 GiB; without chunked prefill the budget is the context.
    config = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", max_model_len=131072,
                          max_num_batched_tokens=8192)
    chunked = plan_memory(config, enable_chunked_prefill=True)
    whole = plan_memory(replace(config, max_num_batched_tokens=None),
                        enable_chunked_prefill=False)
    mlp_per_token = 3 * 14336 * 2
    assert chunked.activation_reserve_bytes < 2 * GIB
    assert (whole.activation_reserve_bytes - chunked.activation_reserve_bytes
            == (131072 - 8192) * mlp_per_token)
