"""The fast path decides exactly what the rules decide: random workloads served both ways.

With no observer that reads every request, the schedulers count the running decodes in bulk
(running_decodes.py); with one, they apply the rules to each request. Every request's token times
and every summary figure must come out the same, in every mode, on pools small enough to preempt.
"""

import random

from config import EngineConfig
from conftest import EveryRequest, make_workload
from forward_model import make_clock
from main import simulate
from modes import MODES


def random_case(rng: random.Random):
    block_size = rng.choice([1, 4, 16])
    max_model_len = rng.choice([32, 128, 512])
    config = EngineConfig(
        block_size=block_size, max_model_len=max_model_len,
        max_num_seqs=rng.choice([2, 8, 64]),
        max_num_batched_tokens=rng.choice([None, max_model_len, 4 * max_model_len]),
        default_chunked_budget=rng.choice([16, 64, 512]),
        long_prefill_token_threshold=rng.choice([0, 0, 0, 24]),
        batching_window_ms=rng.choice([0.0, 10.0]), forward_model=rng.choice(["roofline",
                                                                               "linear"]))
    num_blocks = -(-max_model_len // block_size) * rng.choice([1, 2, 4])  # a few sequences' worth
    rows = []
    arrival_s = 0.0
    for _ in range(rng.randint(1, 40)):
        arrival_s += rng.choice([0.0, 0.0, rng.expovariate(20.0)])
        rows.append((arrival_s, rng.randint(1, max_model_len + 8), rng.randint(1, max_model_len)))
    return config, num_blocks, rows, rng.choice([None, None, 3])


def served(config, num_blocks, rows, max_concurrency, mode, observers):
    recorder = simulate(make_workload(rows, max_concurrency), MODES[mode], config, num_blocks,
                        make_clock(config), observers)
    records = [recorder.record(i) for i in range(len(recorder.status))]
    return records, recorder.summary()


# Summary counters that only some workloads move: each must be moved by several random cases,
# so that "the same on both paths" is not vacuously true of a zero.
COUNTERS = ("num_preemptions", "num_recomputed_tokens", "decode_padding_pct",
            "prefill_padding_pct", "mean_idle_batch_slots", "decodes_beside_prompts_pct",
            "mean_queue_ms", "decode_only_waiting_pct")


def test_bulk_and_one_by_one_serve_every_request_at_the_same_times():
    num_cases_moving = dict.fromkeys(COUNTERS, 0)
    for seed in range(40):
        rng = random.Random(seed)
        config, num_blocks, rows, max_concurrency = random_case(rng)
        moved = set()
        for mode in MODES:
            if mode == "continuous" and config.token_budget(False) < config.max_model_len:
                continue  # refused at start-up (vLLM's rule): nothing to serve
            bulk = served(config, num_blocks, rows, max_concurrency, mode, [])
            rules = served(config, num_blocks, rows, max_concurrency, mode, [EveryRequest()])
            assert bulk == rules, f"seed {seed}, mode {mode}"
            moved |= {name for name in COUNTERS if bulk[1][name] > 0}
        for name in moved:
            num_cases_moving[name] += 1
    assert num_cases_moving["num_preemptions"] >= 10  # the pools were small enough to preempt
    assert min(num_cases_moving.values()) >= 5, num_cases_moving


def test_a_chart_sees_the_same_steps_whether_decodes_run_in_bulk_or_one_by_one():
    from reports.timeseries import StepSeries
    config = EngineConfig(max_model_len=256, default_chunked_budget=64)
    rows = [(0.05 * i, 20 + 37 * i % 200, 1 + 53 * i % 250) for i in range(30)]
    for mode in MODES:
        series = []
        for observers in ([], [EveryRequest()]):
            chart = StepSeries(mode, config.block_size, is_paged=MODES[mode].is_paged)
            served(config, 64, rows, None, mode, observers + [chart])
            series.append(chart)
        assert series[0] == series[1], mode
