"""The engine loop: the virtual clock, queueing, rejection, and the step observers."""

from dataclasses import replace

import pytest

from config import ConfigError, EngineConfig
from conftest import EveryRequest, make_workload
from forward_model import RooflineClock, make_clock
from commands.memory_advice import advised_plan
from gpu_memory import plan_memory
from main import simulate
from modes import MODES


def run(rows, mode="continuous", config=None, observers=()):
    config = config or EngineConfig()
    plan = plan_memory(config)
    return simulate(make_workload(rows), MODES[mode], config, plan.num_gpu_blocks,
                    RooflineClock(config), observers)


def prefill_s(clock, prompt_len):
    return clock.price(prompt_len, 1, prompt_len * (prompt_len + 1) // 2, 0)


def decode_s(clock, context):
    return clock.price(1, 1, context + 1, context)


def test_ttft_of_a_lone_request_is_its_prefill_step():
    clock = RooflineClock(EngineConfig())
    recorder = run([(2.5, 1000, 3)])
    request = recorder.record(0)
    assert request.first_token_s - request.arrival_s == pytest.approx(prefill_s(clock, 1000), rel=1e-12)


def test_ttft_includes_queueing_behind_the_request_ahead():
    # NAIVE: B waits while A prefills and decodes its 2 remaining tokens, then B prefills;
    # one step after another, so the CPU's work adds to each (no async scheduling).
    clock = RooflineClock(EngineConfig(async_scheduling=False))
    recorder = run([(0.0, 100, 3), (0.0, 200, 2)], mode="naive")
    a_done = prefill_s(clock, 100) + decode_s(clock, 100) + decode_s(clock, 101)
    b = recorder.record(1)
    assert b.first_token_s - b.arrival_s == pytest.approx(a_done + prefill_s(clock, 200), rel=1e-12)


def test_a_prompt_that_can_never_fit_is_rejected_and_counted_not_dropped():
    for mode in MODES:
        recorder = run([(0.0, 100, 5), (0.1, 8192, 5), (0.2, 100, 5)], mode=mode)
        summary = recorder.summary()
        assert (summary["completed"], summary["rejected"]) == (2, 1), mode
        assert "8192" in recorder.rejections()[0].reject_reason


def test_a_pool_smaller_than_one_max_model_len_sequence_is_refused_at_start_up():
    # 100 blocks x 16 = 1,600 tokens; one 8,192-token sequence needs 512 blocks.
    with pytest.raises(ConfigError, match="fits: --max-model-len 1600, --num-gpu-blocks-override "
                                          "512$"):
        advised_plan(EngineConfig(num_gpu_blocks_override=100, max_model_len=8192))


def test_a_pool_of_exactly_one_sequence_still_serves_everyone():
    # 512 blocks x 16 = 8,192 tokens = one max_model_len sequence: constant preemption, no stall.
    config = EngineConfig(num_gpu_blocks_override=512)
    rows = [(0.0, 3000, 2000), (0.0, 3000, 2000), (0.0, 3000, 2000)]
    summary = run(rows, mode="chunked", config=config).summary()
    assert summary["completed"] == 3 and summary["num_preemptions"] > 0


def test_observers_see_every_step_in_order_with_free_blocks_after_it():
    steps = []
    recorder = run([(0.0, 40, 3), (0.0, 20, 2)], observers=[steps.append])
    assert [s.index for s in steps] == list(range(recorder.num_steps))
    assert steps[0].start_s == 0.0
    assert all(later.start_s == pytest.approx(earlier.start_s + earlier.step_s)
               for earlier, later in zip(steps, steps[1:]))
    assert steps[-1].num_free_blocks == plan_memory(EngineConfig()).num_gpu_blocks



@pytest.mark.parametrize("observers", [[], [EveryRequest()]], ids=["bulk", "one-by-one"])
def test_a_preemption_counts_the_tokens_it_threw_away_and_they_are_computed_again(observers):
    # 8 blocks of 4 tokens. A and B (prompt 12, 10 outputs) take 3 blocks each, then a 4th;
    # when both fill 16 tokens, A needs a 5th block and preempts B, which had computed 16.
    config = EngineConfig(block_size=4, max_model_len=32, enable_prefix_caching=False)
    recorder = simulate(make_workload([(0.0, 12, 10), (0.0, 12, 10)]), MODES["continuous"],
                        config, 8, RooflineClock(config), observers)
    summary = recorder.summary()
    assert (summary["num_preemptions"], summary["num_recomputed_tokens"]) == (1, 16)
    # Every computed token is a prompt or a fed-back output (the last output never is), or
    # one computed again.
    assert recorder.counters.num_computed_tokens == 2 * (12 + 10 - 1) + 16
    # With prefix caching, B finds again the blocks of its own the pool did not hand out
    # meanwhile: those are not computed twice.
    cached = simulate(make_workload([(0.0, 12, 10), (0.0, 12, 10)]), MODES["continuous"],
                      replace(config, enable_prefix_caching=True), 8, RooflineClock(config),
                      observers).summary()
    assert cached["num_preemptions"] == 1 and cached["prefix_cache_resumed_hits"] > 0
    assert cached["num_recomputed_tokens"] == 16 - cached["prefix_cache_resumed_hits"]


def test_decodes_that_share_a_step_with_a_prompt_and_the_queue_before_the_first_step():
    # Linear clock: step ms = 1 + 0.01 x prompt tokens + 0.5 x decodes. A (prompt 10) runs
    # alone in step 1 (1.1 ms); B (prompt 20, 1 output) arrives at 0.1 ms and runs in step 2
    # beside A's first decode; A's second decode runs alone.
    config = EngineConfig(forward_model="linear", linear_step_ms=1.0,
                          linear_prefill_token_ms=0.01, linear_decode_token_ms=0.5,
                          async_scheduling=False)  # one step at a time: B waits for step 1
    summary = simulate(make_workload([(0.0, 10, 3), (0.0001, 20, 1)]), MODES["continuous"], config,
                       1000, make_clock(config)).summary()
    assert summary["decodes_beside_prompts_pct"] == 50.0  # 1 of A's 2 decode tokens
    assert summary["mean_queue_ms"] == pytest.approx((0 + (1.1 - 0.1)) / 2)
    step_ms = [1.1, 1 + 0.2 + 0.5, 1.5]
    assert summary["prompt_time_pct"] == pytest.approx(100 * (step_ms[0] + step_ms[1]) / sum(step_ms))
