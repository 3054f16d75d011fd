"""The virtual clock: decode is memory-bound, prefill is compute-bound, and physics floors hold."""

import pytest

from batch import SchedulerOutput
from config import EngineConfig
from conftest import make_request
from forward_model import STEP_OVERHEAD_S, LinearClock, RooflineClock
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
    for model in MODELS:
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


def test_long_prefill_time_grows_at_least_linearly_with_length():
    for config in fitting_pairs():
        clock = RooflineClock(config)
        for length in (4096, 8192, 16384):
            short = clock.step_time_s(prefill_batch(length)) - STEP_OVERHEAD_S
            long = clock.step_time_s(prefill_batch(2 * length)) - STEP_OVERHEAD_S
            assert long >= 2 * short, (config, length)


def test_the_linear_clock_charges_every_decode_token_the_same_however_many_share_a_step():
    clock = LinearClock(EngineConfig(forward_model="linear"))
    assert clock.step_time_s(decode_batch(1)) == pytest.approx(0.0002 + 0.0005)
    assert clock.step_time_s(decode_batch(64)) == pytest.approx(0.0002 + 64 * 0.0005)
    assert clock.step_time_s(prefill_batch(100)) == pytest.approx(0.0002 + 100 * 0.00004)
