"""The virtual clock: decode is memory-bound, prefill is compute-bound, and physics floors hold."""

import pytest

from batch import SchedulerOutput
from config import EngineConfig
from conftest import make_request
from dataclasses import replace

from engine_overhead import VERSIONS
from forward_model import (LAYER_FIXED_S, SERVING_GEMM_SHARE, STEP_FIXED_S, LinearClock,
                           RooflineClock, achievable_flops_per_s, all_reduce_s,
                           roofline_corner_flops_per_byte, roofline_s, uses_custom_all_reduce)
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
    """Beyond a bare step (weights read, fixed costs), twice the prompt costs at least twice.
    A long prompt's all-reduces go through NCCL's ring, whose fixed cost the bare step pays."""
    for config in fitting_pairs():
        clock = RooflineClock(config)
        ring_fixed_s = clock.num_all_reduces * GPUS[config.gpu].all_reduce.ring_latency_us * 1e-6
        bare = clock.price(0, 0, 0, 0) - clock.all_reduces_s(0) + ring_fixed_s
        for length in (4096, 8192, 16384):
            short = clock.step_time_s(prefill_batch(length)) - bare
            long = clock.step_time_s(prefill_batch(2 * length)) - bare
            assert long >= 2 * short, (config, length)


def test_at_the_ridge_compute_and_memory_only_partly_hide_behind_each_other():
    assert roofline_s(0.0, 5.0) == 5.0 and roofline_s(5.0, 0.0) == 5.0
    assert max(4.0, 5.0) < roofline_s(4.0, 5.0) < 4.0 + 5.0
    assert roofline_s(4.0, 5.0) == roofline_s(5.0, 4.0)


def test_a_bare_step_costs_the_fixed_costs_of_every_layer_on_top_of_the_weights():
    config = EngineConfig(async_scheduling=False)
    clock = RooflineClock(config)
    model = MODELS[config.model]
    fixed_s = model.num_layers * LAYER_FIXED_S + STEP_FIXED_S
    cpu_s = VERSIONS[config.vllm_version].step_s  # no request scheduled: the CPU's base alone
    assert clock.price(0, 0, 0, 0) == pytest.approx(clock.weight_stream_s + fixed_s + cpu_s)


def test_fp8_weights_halve_the_weight_stream_but_do_not_double_the_prefill_rate():
    bf16 = RooflineClock(EngineConfig(model="llama-3.3-70b", gpu="h200", tensor_parallel_size=2))
    fp8 = RooflineClock(EngineConfig(model="llama-3.3-70b-fp8", gpu="h200",
                                     tensor_parallel_size=2))
    assert fp8.weight_stream_s < 0.51 * bf16.weight_stream_s
    assert 0.5 * bf16.gemm_s_per_token < fp8.gemm_s_per_token < bf16.gemm_s_per_token


def test_all_reduce_cost_grows_with_the_group_and_does_not_split_like_the_weights():
    clocks = [RooflineClock(EngineConfig(model="llama-3.3-70b", gpu="h100-sxm5",
                                         tensor_parallel_size=tp)) for tp in (1, 2, 4, 8)]
    decode_all_reduce_s = [clock.all_reduces_s(1) for clock in clocks]
    assert decode_all_reduce_s == sorted(decode_all_reduce_s)
    assert decode_all_reduce_s[0] == 0 < decode_all_reduce_s[1]
    one_decode_s = [clock.step_time_s(decode_batch(1)) for clock in clocks]
    assert one_decode_s[3] > one_decode_s[0] / 8 + clocks[0].fixed_s  # 8 GPUs: far from 8x


def test_small_messages_take_the_custom_all_reduce_and_large_ones_the_ring():
    h100 = GPUS["h100-sxm5"]
    decode_bytes, prefill_bytes = 8192 * 2, 2048 * 8192 * 2  # one token; a 2,048-token prompt
    assert uses_custom_all_reduce(h100, 8, decode_bytes)
    assert not uses_custom_all_reduce(h100, 8, prefill_bytes)  # 32 MiB: above 8 MiB
    custom_s = h100.all_reduce.custom_latency_us * 1e-6
    assert all_reduce_s(h100, 8, decode_bytes) < 2 * custom_s  # latency-bound, near the kernel's
    ring_bandwidth_s = prefill_bytes * 2 * 7 / 8 / (h100.all_reduce.ring_bus_gbs * 1e9)
    assert all_reduce_s(h100, 8, prefill_bytes) > ring_bandwidth_s  # the ring's bytes and more
    # GPUs on PCIe only: vLLM's custom kernel at TP 2, NCCL beyond.
    l40s = GPUS["l40s"]
    assert uses_custom_all_reduce(l40s, 2, decode_bytes)
    assert not uses_custom_all_reduce(l40s, 4, decode_bytes)


def test_each_gpu_has_its_own_achievable_shares_and_the_mi300x_reaches_less_of_its_peak():
    h100, mi300x = GPUS["h100-sxm5"], GPUS["mi300x"]
    assert mi300x.achievable.gemm_fp8 < h100.achievable.gemm_fp8
    assert mi300x.achievable.hbm < h100.achievable.hbm
    # Datasheets make the MI300X 1.32x an H100 at FP8; what the GEMMs reach, under 1x.
    assert mi300x.fp8_tflops / h100.fp8_tflops > 1.3
    assert achievable_flops_per_s(mi300x, fp8=True) < achievable_flops_per_s(h100, fp8=True)
    for gpu in GPUS.values():
        for share in (gpu.achievable.gemm_16bit, gpu.achievable.gemm_fp8, gpu.achievable.hbm):
            assert share is None or 0 < share <= 1, gpu.name
        assert gpu.achievable.source and gpu.all_reduce.source
        # The roofline corner follows from the achievable figures, not the datasheet's.
        datasheet_ridge = gpu.bf16_tflops * 1e12 / (gpu.memory_bandwidth_gbs * 1e9)
        corner = roofline_corner_flops_per_byte(gpu, fp8=False)
        assert corner == pytest.approx(datasheet_ridge * gpu.achievable.gemm_16bit
                                       * SERVING_GEMM_SHARE / gpu.achievable.hbm)


def test_async_scheduling_hides_the_cpu_part_that_sync_adds():
    batch = decode_batch(256)
    sync = RooflineClock(EngineConfig(gpu="h100-sxm5", model="llama-3.1-8b",
                                      async_scheduling=False))
    overlapped = RooflineClock(EngineConfig(gpu="h100-sxm5", model="llama-3.1-8b"))
    cost = sync.step_cost(batch)
    assert cost.cpu_s > 0 and cost == overlapped.step_cost(batch)
    assert sync.step_time_s(batch) == pytest.approx(cost.gpu_s + cost.cpu_s)
    assert overlapped.step_time_s(batch) == pytest.approx(max(cost.gpu_s, cost.cpu_s))


def test_v0_spends_more_cpu_per_scheduled_request_than_v1():
    v0 = RooflineClock(EngineConfig(vllm_version="0.6", async_scheduling=False))
    v1 = RooflineClock(EngineConfig(async_scheduling=False))
    small, large = decode_batch(8), decode_batch(256)
    assert v0.step_cost(large).cpu_s - v0.step_cost(small).cpu_s > (
        3 * (v1.step_cost(large).cpu_s - v1.step_cost(small).cpu_s))
    assert v0.step_cost(large).gpu_s == v1.step_cost(large).gpu_s  # the GPU's work is the same


def test_the_linear_clock_charges_every_decode_token_the_same_however_many_share_a_step():
    clock = LinearClock(EngineConfig(forward_model="linear"))
    assert clock.step_time_s(decode_batch(1)) == pytest.approx(0.0002 + 0.0005)
    assert clock.step_time_s(decode_batch(64)) == pytest.approx(0.0002 + 64 * 0.0005)
    assert clock.step_time_s(prefill_batch(100)) == pytest.approx(0.0002 + 100 * 0.00004)
