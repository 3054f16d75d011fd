"""Arrival processes: gamma gaps (Poisson at burstiness 1) and the closed loop of clients."""

import random
import statistics

import pytest

from arrivals import ClosedLoopClients, arrival_times
from conftest import make_request


def gaps_of(rng_seed: int, request_rate: float, burstiness: float, count: int) -> list[float]:
    times = arrival_times(random.Random(rng_seed), request_rate, burstiness)
    arrivals = [next(times) for _ in range(count + 1)]
    return [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]


def test_poisson_arrivals_have_mean_gap_one_over_rate():
    gaps = gaps_of(rng_seed=1, request_rate=5.0, burstiness=1.0, count=20_000)
    assert statistics.fmean(gaps) == pytest.approx(1 / 5.0, rel=0.03)
    # Exponential gaps: the standard deviation equals the mean (coefficient of variation 1).
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)


def test_lower_burstiness_keeps_the_rate_but_spreads_the_gaps():
    gaps = gaps_of(rng_seed=2, request_rate=5.0, burstiness=0.25, count=20_000)
    assert statistics.fmean(gaps) == pytest.approx(1 / 5.0, rel=0.05)
    # Gamma shape k: coefficient of variation 1 / sqrt(k) = 2.
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(2.0, rel=0.1)


def test_infinite_rate_sends_everything_at_time_zero():
    times = arrival_times(random.Random(0), float("inf"), 1.0)
    assert [next(times) for _ in range(5)] == [0.0] * 5


def test_closed_loop_sends_the_next_request_when_one_finishes():
    requests = iter([make_request(i, prompt_len=32) for i in range(4)])
    clients = ClosedLoopClients(requests, max_concurrency=2)
    assert [r.request_id for r in clients.pop_arrived(0.0)] == ["0", "1"]
    assert clients.next_arrival_s() is None  # both slots taken: nothing can be sent
    clients.on_finished(1, 5.0)
    sent = clients.pop_arrived(5.0)
    assert [(r.request_id, r.arrival_s) for r in sent] == [("2", 5.0)]  # sent late, stamped then
