"""The virtual clock: decode is memory-bound, prefill is compute-bound, and physics floors hold."""

import pytest

from batch import SchedulerOutput
from config import EngineConfig
from conftest import make_request
from dataclasses import replace

from forward_model import LAYER_FIXED_S, STEP_FIXED_S, LinearClock, RooflineClock, roofline_s
from gpu_memory import plan_memory
from presets import GPUS, MODELS


def decode_batch(num_seqs, context=1000):
    batch = SchedulerOutput()
    for i in range(num_seqs):
        batch.add(make_request(i, prompt_len=context), 1, context)
    return batch


def prefill_batch(prompt_len):
    batch = SchedulerOutput()
    batch.add(make_request("p", prompt_len), prompt_len, 0)
    return batch


def test_a_decode_step_of_64_costs_far_less_than_64_steps_of_one():
    clock = RooflineClock(EngineConfig())
    one, sixty_four = clock.step_time_s(decode_batch(1)), clock.step_time_s(decode_batch(64))
    assert sixty_four < 2 * one            # the weights are read once for all 64
    assert sixty_four > one                # ... but their KV and FLOPs are not free


def test_a_2000_token_prefill_costs_far_more_than_a_decode_step():
    clock = RooflineClock(EngineConfig())
    assert clock.step_time_s(prefill_batch(2000)) > 5 * clock.step_time_s(decode_batch(1))


def fitting_pairs():
    """Dense presets on every GPU they fit (MoE presets read only some of their weights per
    step: their floors are test_moe.py's)."""
    for model in (key for key, spec in MODELS.items() if spec.moe is None):
        for gpu in GPUS:
            for tp in (1, 2, 8):
                config = EngineConfig(model=model, gpu=gpu, tensor_parallel_size=tp,
                                      max_model_len=2048)
                try:
                    plan_memory(config)
                except ValueError:
                    continue
                yield config


@pytest.mark.parametrize("num_seqs", [1, 8, 64, 256])
def test_no_decode_step_beats_streaming_the_weights_at_full_bandwidth(num_seqs):
    configs = list(fitting_pairs())
    assert any(c.model == "llama-3.3-70b-fp8" and c.gpu == "h100-sxm5" for c in configs)
    for config in configs:
        model, gpu = MODELS[config.model], GPUS[config.gpu]
        streamed = model.num_linear_params * (1 if model.weight_dtype == "fp8" else 2)
        floor_s = streamed / config.tensor_parallel_size / (gpu.memory_bandwidth_gbs * 1e9)
        assert RooflineClock(config).step_time_s(decode_batch(num_seqs)) >= floor_s, config


def test_no_step_beats_its_weight_and_kv_bytes_at_full_bandwidth():
    for config in fitting_pairs():
        model, gpu = MODELS[config.model], GPUS[config.gpu]
        clock = RooflineClock(config)
        weight_bytes = model.num_linear_params * (1 if model.weight_dtype == "fp8" else 2)
        kv_bytes_per_token = model.kv_bytes_per_token(config.kv_cache_dtype)
        for batch, kv_tokens in ((decode_batch(32, context=1500), 32 * 1501),
                                 (prefill_batch(2048), 2048)):
            floor_s = ((weight_bytes + kv_bytes_per_token * kv_tokens)
                       / config.tensor_parallel_size / (gpu.memory_bandwidth_gbs * 1e9))
            assert clock.step_time_s(batch) >= floor_s, config


def test_long_prefill_time_grows_at_least_linearly_with_length():
    """Beyond a bare step (weights read, fixed costs), twice the prompt costs at least twice."""
    for config in fitting_pairs():
        clock = RooflineClock(config)
        bare = clock.price(0, 0, 0, 0)
        for length in (4096, 8192, 16384):
            short = clock.step_time_s(prefill_batch(length)) - bare
            long = clock.step_time_s(prefill_batch(2 * length)) - bare
            assert long >= 2 * short, (config, length)


def test_at_the_ridge_compute_and_memory_only_partly_hide_behind_each_other():
    assert roofline_s(0.0, 5.0) == 5.0 and roofline_s(5.0, 0.0) == 5.0
    assert max(4.0, 5.0) < roofline_s(4.0, 5.0) < 4.0 + 5.0
    assert roofline_s(4.0, 5.0) == roofline_s(5.0, 4.0)


def test_a_bare_step_costs_the_fixed_costs_of_every_layer_on_top_of_the_weights():
    clock = RooflineClock(EngineConfig())
    model = MODELS[EngineConfig().model]
    fixed_s = model.num_layers * LAYER_FIXED_S + STEP_FIXED_S
    assert clock.price(0, 0, 0, 0) == pytest.approx(clock.weight_stream_s + fixed_s)


def test_fp8_weights_halve_the_weight_stream_but_do_not_double_the_prefill_rate():
    bf16 = RooflineClock(EngineConfig(model="llama-3.3-70b", gpu="h200", tensor_parallel_size=2))
    fp8 = RooflineClock(EngineConfig(model="llama-3.3-70b-fp8", gpu="h200",
                                     tensor_parallel_size=2))
    assert fp8.weight_stream_s < 0.51 * bf16.weight_stream_s
    assert 0.5 * bf16.gemm_s_per_token < fp8.gemm_s_per_token < bf16.gemm_s_per_token


def test_all_reduce_latency_grows_with_the_group_and_does_not_split_like_the_weights():
    clocks = [RooflineClock(EngineConfig(model="llama-3.3-70b", gpu="h100-sxm5",
                                         tensor_parallel_size=tp)) for tp in (1, 2, 4, 8)]
    fixed_s = [clock.fixed_s for clock in clocks]
    assert fixed_s == sorted(fixed_s) and len(set(fixed_s)) == 4
    assert clocks[0].all_reduce_s_per_token == 0 < clocks[1].all_reduce_s_per_token
    one_decode_s = [clock.step_time_s(decode_batch(1)) for clock in clocks]
    assert one_decode_s[3] > one_decode_s[0] / 8 + fixed_s[0]  # 8 GPUs: far from 8x faster


def test_the_linear_clock_charges_every_decode_token_the_same_however_many_share_a_step():
    clock = LinearClock(EngineConfig(forward_model="linear"))
    assert clock.step_time_s(decode_batch(1)) == pytest.approx(0.0002 + 0.0005)
    assert clock.step_time_s(decode_batch(64)) == pytest.approx(0.0002 + 64 * 0.0005)
    assert clock.step_time_s(prefill_batch(100)) == pytest.approx(0.0002 + 100 * 0.00004)
