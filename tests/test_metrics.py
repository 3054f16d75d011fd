"""Percentiles and latency metrics, against values computed by hand."""

import math
import random
from collections import Counter

import pytest

from metrics import RunRecorder, peak_concurrent_requests, percentile, weighted_percentile
from batch import SchedulerOutput, StepResult
from conftest import make_request
from request import RequestStatus


def test_percentiles_interpolate_linearly_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5          # rank 1.5: halfway between 2 and 3
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert abs(percentile(values, 99) - 3.97) < 1e-12  # rank 2.97
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 99) == 0.0


def numpy_linear_percentile(values: list[float], p: float) -> float:
    """numpy.percentile(values, p) with its default method "linear", written out: the value at
    rank p/100 x (n - 1) of the sorted list, interpolated between the two ranks around it."""
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def test_counted_values_give_numpys_percentiles_of_the_expanded_list():
    rng = random.Random(7)
    for _ in range(200):
        counts = Counter({round(rng.uniform(0, 1), 3): rng.randint(1, 20)
                          for _ in range(rng.randint(1, 12))})
        expanded = [v for v, c in counts.items() for _ in range(c)]
        for p in (0, 1, 50, 90, 98, 99, 99.5, 100, rng.uniform(0, 100)):
            assert weighted_percentile(counts, p) == pytest.approx(
                numpy_linear_percentile(expanded, p), rel=1e-12, abs=1e-15)
    # P99 of 100 items: rank 98.01 -> between the 99th (0.05) and 100th (0.9) values.
    counts = Counter({0.010: 97, 0.050: 2, 0.900: 1})
    assert abs(weighted_percentile(counts, 99) - (0.05 + 0.85 * 0.01)) < 1e-12


def finished(request_id, arrival_s, token_times):
    request = make_request(request_id, prompt_len=10, max_tokens=len(token_times),
                           arrival_s=arrival_s)
    request.status = RequestStatus.FINISHED
    request.first_scheduled_s = arrival_s  # admitted on arrival
    for t in token_times:
        request.append_output_token(t)
    return request


def arrive_and_finish(recorder, request):
    recorder.on_arrival(request)
    recorder.on_finished(request)


def test_ttft_tpot_e2el_and_throughput_follow_vllm_bench_definitions():
    recorder = RunRecorder(num_total_kv_slots=100)
    arrive_and_finish(recorder, finished("a", 0.0, [0.5, 0.6, 0.8]))  # TTFT 0.5, TPOT 0.15,
    #                                                                    E2EL 0.8
    arrive_and_finish(recorder, finished("b", 1.0, [2.0]))            # TTFT 1.0, no TPOT, E2EL 1.0
    recorder.itl_gaps.add(0.1, 1)
    recorder.itl_gaps.add(0.2, 1)
    summary = recorder.summary()
    assert summary["completed"] == 2
    assert summary["duration"] == 2.0               # first arrival 0.0 to last token 2.0
    assert summary["total_output_tokens"] == 4
    assert summary["output_throughput"] == 2.0       # 4 tokens / 2 s
    assert summary["mean_ttft_ms"] == 750.0
    assert abs(summary["mean_tpot_ms"] - 150.0) < 1e-9
    assert abs(summary["mean_itl_ms"] - 150.0) < 1e-9
    assert summary["mean_e2el_ms"] == 900.0


def test_kv_waste_is_time_weighted_over_steps():
    recorder = RunRecorder(num_total_kv_slots=100)
    batch = SchedulerOutput()
    recorder.on_step(1.0, batch, StepResult(), reserved_slots=80, used_slots=20,
                     start_s=0.0, num_waiting=0)  # 75% empty
    recorder.on_step(3.0, batch, StepResult(), reserved_slots=40, used_slots=40,
                     start_s=1.0, num_waiting=0)  # full
    summary = recorder.summary()
    assert summary["kv_waste_pct"] == 100 * 60 / (80 + 120)  # 60 empty slot-s of 200 reserved
    assert summary["peak_kv_usage_pct"] == 80.0


def test_the_recorder_keeps_no_request_once_it_ended():
    recorder = RunRecorder(num_total_kv_slots=100)
    request = finished("a", 0.0, [0.5, 0.6])
    arrive_and_finish(recorder, request)
    assert not any(value is request for value in vars(recorder).values())
    assert recorder.record(0).last_token_s == 0.6 and recorder.num_completed == 1


def test_gaps_moved_out_of_the_counter_keep_exact_percentiles(monkeypatch):
    """A long run's gaps leave the Counter for flat arrays (metrics.GapCounts); the value at
    every rank is still found exactly, duplicates across the moves included."""
    from metrics import GapCounts
    monkeypatch.setattr(GapCounts, "LIVE_LIMIT", 50)
    rng = random.Random(3)
    gaps, expected = GapCounts(), Counter()
    for _ in range(2000):
        value, count = rng.choice([0.5, 0.25]) if rng.random() < 0.1 else rng.random(), rng.randint(1, 9)
        gaps.add(value, count)
        gaps.bound()
        expected[value] += count
    assert len(gaps.values) > 0  # the arrays were used
    exact = weighted_percentile  # the Counter's own answer
    moved = gaps.distribution()
    for p in (0, 1, 10, 50, 90, 99, 99.9, 100):
        assert moved.percentile(p) == exact(expected, p)
    assert moved.mean() == pytest.approx(sum(v * c for v, c in expected.items()) / moved.total,
                                         rel=1e-12)


def test_many_percentiles_at_once_are_each_percentile_alone():
    """ArrayDistribution.percentiles gathers the value ranges many ranks fall in with one pass
    over the values: each answer is what percentile(p) alone, and the sorted list, give."""
    from array import array
    from metrics import ArrayDistribution, Distribution
    rng = random.Random(11)
    values = [rng.choice([0.5, 0.125, rng.random()]) * rng.choice([1, 1e3]) for _ in range(5000)]
    counts = [rng.randint(1, 5) for _ in values]
    ps = [0, 1, 5, 10, 25, 33.3, 50, 75, 90, 95, 99, 99.9, 100]
    expected = Counter()
    for value, count in zip(values, counts):
        expected[value] += count
    for weighted in (False, True):
        exact = Distribution.of_counts(expected if weighted else Counter(values))
        at_once = ArrayDistribution(array("d", values), array("I", counts) if weighted else None)
        alone = ArrayDistribution(array("d", values), array("I", counts) if weighted else None)
        answers = at_once.percentiles(ps)
        assert len(at_once._sorted_buckets) > 2  # the one pass gathered several ranges
        assert answers == [alone.percentile(p) for p in ps] == [exact.percentile(p) for p in ps]


def test_peak_in_flight_is_the_event_sweep_with_ends_first():
    """metrics.peak_concurrent_requests merges sorted starts and ends; it gives what a sweep
    over (time, +1 / -1) events in time order gives, an end before a start at the same
    instant, on intervals with many shared endpoints."""
    from metrics import RequestRecord
    rng = random.Random(4)
    for _ in range(200):
        records = []
        for index in range(rng.randint(0, 30)):
            start_s = rng.choice([0.0, 1.0, 2.0, rng.random() * 3])
            end_s = start_s + rng.choice([0.0, 1.0, rng.random()])
            records.append(RequestRecord(index, start_s, 1, 1, end_s, end_s, 1))
        events = sorted([(r.arrival_s, 1) for r in records]
                        + [(r.last_token_s, -1) for r in records])
        in_flight = peak = 0
        for _, change in events:
            in_flight += change
            peak = max(peak, in_flight)
        assert peak_concurrent_requests(iter(records)) == peak


def test_a_run_of_steps_is_recorded_as_its_steps_one_at_a_time_would_be(monkeypatch):
    """A run of identical steps (decode_runs.py) reaches the recorder at once: every counter,
    every sum of seconds (added one step at a time, in order) and every gap, including where
    the gap Counter moves to its arrays, are what one step after another records."""
    from batch import AdmissionLimit, DecodeRun
    from metrics import GapCounts
    monkeypatch.setattr(GapCounts, "LIVE_LIMIT", 7)
    rng = random.Random(5)
    prompt = make_request("p", 900, 10)
    prompt.first_scheduled_s = 0.0  # its first chunk ran before the run: a prompt in progress
    for num_prompt_tokens in (0, 40):
        by_steps, at_once = RunRecorder(10_000), RunRecorder(10_000)
        run = DecodeRun(iter(()), 12, 12, 5000, 0, 0.0, admission_limit=AdmissionLimit.KV_BLOCKS,
                        prompt=prompt if num_prompt_tokens else None,
                        num_prompt_tokens=num_prompt_tokens, prompt_context_tokens=100)
        steps, itls_s = [], []
        for index in range(30):
            step_s, itl_s = rng.uniform(0.01, 0.03), rng.choice([0.02, rng.uniform(0.01, 0.05)])
            reserved = 4000 + 16 * index
            steps.append((step_s, reserved, reserved - rng.randint(0, 15)))
            itls_s.append(itl_s)
            batch = SchedulerOutput(admission_limit=AdmissionLimit.KV_BLOCKS)
            batch.add_decodes(12, 5000 + 12 * index)
            if num_prompt_tokens:
                batch.add(prompt, num_prompt_tokens, 100 + num_prompt_tokens * index)
            result = StepResult(num_bulk_sampled=12, itls=[(itl_s, 12)])
            by_steps.on_step(step_s, batch, result, *steps[-1][1:], start_s=0.0, num_waiting=3)
        at_once.on_decode_run(run, steps, itls_s, num_waiting=3)
        counted = {name: value for name, value in vars(at_once.counters).items()
                   if name not in ("queue_s", "spec_decoding")}  # (per request; objects)
        assert counted == {name: vars(by_steps.counters)[name] for name in counted}
        gaps, expected = at_once.latencies.itl_gaps, by_steps.latencies.itl_gaps
        assert (gaps.live, list(gaps.values), list(gaps.counts)) == (
            expected.live, list(expected.values), list(expected.counts))
        assert len(gaps.values) > 0  # the arrays were used


def test_queue_time_summed_as_it_goes_is_math_fsum_of_every_wait():
    """engine_counters.ExactSum keeps no values, yet gives what math.fsum of them all gives."""
    from engine_counters import ExactSum
    rng = random.Random(5)
    values = [rng.choice([1e-9, 1.0, 1e6, 0.1]) * rng.random() for _ in range(3000)]
    total = ExactSum()
    for value in values:
        total.add(value)
    assert total.value() == math.fsum(values)
    assert len(total.partials) < 10


def test_many_latencies_kept_unsorted_give_the_sorted_lists_percentiles(monkeypatch):
    """Past metrics.MANY completed requests, TTFT, TPOT and E2EL stay in flat arrays
    (ArrayDistribution); every percentile is still the value the sorted list gives."""
    import metrics
    monkeypatch.setattr(metrics, "MANY", 10)
    rng = random.Random(8)
    recorder = RunRecorder(num_total_kv_slots=100)
    for index in range(200):
        arrival_s = rng.random()
        times = sorted(arrival_s + rng.choice([0.5, rng.random()]) for _ in range(rng.randint(1, 4)))
        arrive_and_finish(recorder, finished(str(index), arrival_s, times))
    for name in ("ttft", "tpot", "e2el"):
        moved = recorder.latency_distribution(name)
        assert isinstance(moved, metrics.ArrayDistribution)
        monkeypatch.setattr(metrics, "MANY", 10**9)
        exact = recorder.latency_distribution(name)
        monkeypatch.setattr(metrics, "MANY", 10)
        for p in (0, 1, 25, 50, 75, 99, 100):
            assert moved.percentile(p) == exact.percentile(p), (name, p)
        assert moved.mean() == pytest.approx(exact.mean(), rel=1e-12)
