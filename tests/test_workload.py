"""The synthetic datasets: vLLM's random lengths, normal lengths, and what a seed pins down."""

import random
import statistics

import pytest

from workload import (NormalLengths, RandomLengths, WorkloadError, normal_workload,
                      random_workload)


def lengths_of(workload) -> list[tuple[int, int]]:
    return [(r.prompt_len, r.max_tokens) for r in workload.make_requests()]


@pytest.mark.parametrize("input_len, output_len, ratio, input_range, output_range", [
    (100, 10, 0.5, (50, 150), (5, 15)),
    (1024, 128, 0.1, (921, 1127), (115, 141)),  # floor(921.6), ceil(1126.4); floor(115.2), ceil(140.8)
    (1, 1, 0.5, (1, 2), (1, 2)),                # floor(0.5) = 0 is raised to 1 token
    (1000, 1000, 0.0, (1000, 1000), (1000, 1000)),
])
def test_random_lengths_use_vllms_floor_and_ceil_bounds(input_len, output_len, ratio,
                                                        input_range, output_range):
    lengths = RandomLengths(input_len, output_len, ratio)
    assert (lengths.input_range, lengths.output_range) == (input_range, output_range)


def test_random_lengths_reach_both_ends_and_never_leave_them():
    lengths = RandomLengths(input_len=100, output_len=10, range_ratio=0.5)
    rng = random.Random(0)
    draws = [lengths.draw(rng) for _ in range(3000)]
    assert {min(p for p, _ in draws), max(p for p, _ in draws)} == {50, 150}
    assert {min(o for _, o in draws), max(o for _, o in draws)} == {5, 15}


@pytest.mark.parametrize("ratio", [1.0, -0.1, float("nan")])
def test_random_range_ratio_outside_zero_to_one_is_refused(ratio):
    with pytest.raises(WorkloadError, match=r"--random-range-ratio must be a number in \[0, 1\)"):
        RandomLengths(range_ratio=ratio)


def test_fixed_length_offline_workload_sends_every_request_at_once():
    workload = random_workload(input_len=1000, output_len=1000, num_prompts=5)
    requests = list(workload.make_requests())
    assert [(r.arrival_s, r.prompt_len, r.max_tokens) for r in requests] == [(0.0, 1000, 1000)] * 5
    assert workload.params["request_rate"] == "inf"  # JSON has no infinity


def test_same_seed_sends_the_same_requests_at_any_rate():
    offline = random_workload(range_ratio=0.5, num_prompts=50, seed=7)
    online = random_workload(range_ratio=0.5, num_prompts=50, seed=7, request_rate=2.0)
    assert lengths_of(offline) == lengths_of(online)
    assert lengths_of(random_workload(range_ratio=0.5, num_prompts=50, seed=8)) != lengths_of(offline)
    assert list(online.make_requests())[-1].arrival_s > 0


def test_same_seed_gives_identical_streams():
    first = [(r.arrival_s, r.prompt_len, r.max_tokens)
             for r in normal_workload(num_prompts=20, request_rate=3.0, seed=3).make_requests()]
    again = [(r.arrival_s, r.prompt_len, r.max_tokens)
             for r in normal_workload(num_prompts=20, request_rate=3.0, seed=3).make_requests()]
    assert first == again


def test_normal_lengths_are_whole_tokens_clipped_to_one_and_max_model_len():
    lengths = NormalLengths(input_mean=10, input_std=1000, output_mean=10, output_std=1000,
                            max_model_len=50)
    rng = random.Random(0)
    draws = [length for _ in range(500) for length in lengths.draw(rng)]
    assert all(isinstance(length, int) for length in draws)
    assert (min(draws), max(draws)) == (1, 50)


def test_exercise_four_outputs_have_mean_1500_and_std_600():
    outputs = [output for _, output in lengths_of(normal_workload(num_prompts=4000, seed=0))]
    assert statistics.fmean(outputs) == pytest.approx(1500, rel=0.03)
    assert statistics.stdev(outputs) == pytest.approx(600, rel=0.05)


def test_negative_standard_deviation_is_refused():
    with pytest.raises(WorkloadError,
                       match=r"--output-std must be a number in \[0, 10,000,000\] tokens"):
        normal_workload(output_std=-1)
