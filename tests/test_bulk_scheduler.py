"""The fast path decides exactly what the rules decide: random workloads served both ways.

With no observer that reads every request, the schedulers count the running decodes in bulk
(running_decodes.py), and fast-forward runs of identical steps (decode_runs.py), with async
scheduling too; with one, they apply the rules to each request. Every request's token times and every
summary figure must come out the same, in every mode, synchronous and async, on pools small
enough to preempt.
"""

import random
from dataclasses import replace

import pytest

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


def served(config, num_blocks, rows, max_concurrency, mode, observers, workload=None):
    workload = workload or make_workload(rows, max_concurrency)
    recorder = simulate(workload, MODES[mode], config, num_blocks, make_clock(config), observers)
    records = [recorder.record(i) for i in range(len(recorder.status))]
    return records, recorder.summary()


def schedulings(config, mode):
    """The continuous modes both ways, async scheduling (the default) and synchronous; NAIVE and
    STATIC know only the synchronous loop."""
    if not MODES[mode].uses_async_scheduling(config):
        return [config]
    return [config, replace(config, async_scheduling=False)]


# Summary counters that only some workloads move: each must be moved by several random cases,
# so that "the same on both paths" is not vacuously true of a zero.
COUNTERS = ("num_preemptions", "num_recomputed_tokens", "decode_padding_pct",
            "prefill_padding_pct", "mean_idle_batch_slots", "decodes_beside_prompts_pct",
            "mean_queue_ms", "decode_only_waiting_pct", "waiting_on_kv_blocks_pct",
            "waiting_on_max_num_seqs_pct", "waiting_on_prompt_budget_pct", "mean_num_waiting")
# (waiting_on_decode_budget_pct, a budget spent by decodes alone, needs more decodes than tokens
# of budget: rare among these cases, so a test of its own below.)


def test_bulk_and_one_by_one_serve_every_request_at_the_same_times():
    num_cases_moving = dict.fromkeys(COUNTERS, 0)
    for seed in range(40):
        rng = random.Random(seed)
        config, num_blocks, rows, max_concurrency = random_case(rng)
        moved = set()
        for mode in MODES:
            if mode == "continuous" and config.token_budget(False) < config.max_model_len:
                continue  # refused at start-up (vLLM's rule): nothing to serve
            for scheduling in schedulings(config, mode):
                bulk = served(scheduling, num_blocks, rows, max_concurrency, mode, [])
                rules = served(scheduling, num_blocks, rows, max_concurrency, mode,
                               [EveryRequest()])
                assert bulk == rules, f"seed {seed}, mode {mode}, {scheduling.async_scheduling=}"
                moved |= {name for name in COUNTERS if bulk[1][name] > 0}
        for name in moved:
            num_cases_moving[name] += 1
    assert num_cases_moving["num_preemptions"] >= 10  # the pools were small enough to preempt
    assert min(num_cases_moving.values()) >= 5, num_cases_moving


def workload_of_shared_prompts(rows, rng: random.Random):
    """`rows` as requests whose tokens are known, for prefix caching: prompts opening with one
    of two shared prefixes, some with their outputs known in advance too (a recorded answer,
    whose blocks others may find)."""
    from request import Request, TokenContent
    from workload import Workload
    contents = []
    for _, prompt_len, output_len in rows:
        prefix = tuple(range(rng.choice([0, 1]) * 7, rng.choice([0, 1]) * 7 + prompt_len // 2))
        prompt = prefix + tuple(rng.randrange(3) for _ in range(prompt_len - len(prefix)))
        outputs = tuple(rng.randrange(3) for _ in range(rng.choice([0, 0, output_len])))
        contents.append(TokenContent.of([prompt], outputs))

    def make_requests():
        return iter([Request(str(i), a, p, o, content=content)
                     for i, ((a, p, o), content) in enumerate(zip(rows, contents))])

    return Workload("test", f"{len(rows)} test requests", {"name": "test"}, make_requests)


def test_fast_forwards_with_prefix_caching_serve_every_request_at_the_same_times(monkeypatch):
    """Prefix caching, async scheduling and synchronous: decodes' own blocks are hashed as
    their tokens arrive, and a recorded answer's blocks are shared (under async scheduling the
    fast-forward stays off while one decodes; synchronously its runs go one step at a time,
    registering its blocks as the rules do); random cases served both ways."""
    from bulk_scheduler import GroupedDecodes
    steps_apart = []
    one_step_at_a_time = GroupedDecodes._apply_decode_run_steps

    def noted(self, run, step_ends_s):
        steps_apart.append(len(step_ends_s))
        return one_step_at_a_time(self, run, step_ends_s)

    monkeypatch.setattr(GroupedDecodes, "_apply_decode_run_steps", noted)
    for seed in range(10):
        rng = random.Random(seed)
        config, num_blocks, rows, _ = random_case(rng)
        config = replace(config, enable_prefix_caching=True)
        workload = workload_of_shared_prompts(rows, rng)
        for mode in ("continuous", "chunked"):
            if mode == "continuous" and config.token_budget(False) < config.max_model_len:
                continue
            for scheduling in schedulings(config, mode):
                bulk = served(scheduling, num_blocks, rows, None, mode, [], workload)
                rules = served(scheduling, num_blocks, rows, None, mode, [EveryRequest()],
                               workload)
                assert bulk == rules, f"seed {seed}, mode {mode}, {scheduling.async_scheduling=}"
    assert sum(steps_apart) > 20, steps_apart  # runs of a recorded answer's decodes were taken


def test_async_scheduling_fast_forwards_decodes_alone(monkeypatch):
    """Eight prompts of 40 tokens sent at once for 200 outputs each, async scheduling: 201
    steps, the prompts', 199 of the eight decodes and one reading their last tokens. The decodes
    form a group once their first tokens are out (the third step, AsyncBulkScheduler); every
    decode step after it, to the one that puts their last tokens in flight, is one
    fast-forwarded run (apply_decode_run): 197 steps, with the same results as the rules one
    step at a time."""
    from bulk_scheduler import AsyncBulkScheduler
    fast_forwarded = []
    apply_decode_run = AsyncBulkScheduler.apply_decode_run

    def counted(scheduler, run, reads_s):
        fast_forwarded.append(len(reads_s))
        apply_decode_run(scheduler, run, reads_s)

    monkeypatch.setattr(AsyncBulkScheduler, "apply_decode_run", counted)
    config = EngineConfig(max_model_len=512)
    rows = [(0.0, 40, 200)] * 8
    bulk = served(config, 256, rows, None, "chunked", [])
    rules = served(config, 256, rows, None, "chunked", [EveryRequest()])
    assert bulk == rules
    assert bulk[1]["num_steps"] == 201
    assert fast_forwarded == [197]


def test_a_budget_spent_by_decodes_alone_is_seen_the_same_on_both_paths():
    """Eight tokens of budget, twelve one-token prompts of 40 outputs, on the linear clock (0.2
    ms a step, 0.04 a prompt token, 0.5 a decode). Step 0 admits eight (0.52 ms; four wait
    behind prompt tokens); steps 1-39 decode those eight and nothing else fits (4.2 ms each;
    four wait behind decodes alone); step 40 admits the last four (0.36 ms), steps 41-79 decode
    them (2.2 ms each)."""
    config = EngineConfig(max_model_len=128, default_chunked_budget=8, forward_model="linear")
    bulk = served(config, 64, [(0.0, 1, 40)] * 12, None, "chunked", [])
    rules = served(config, 64, [(0.0, 1, 40)] * 12, None, "chunked", [EveryRequest()])
    assert bulk == rules
    busy_ms = 0.52 + 39 * 4.2 + 0.36 + 39 * 2.2
    summary = bulk[1]
    assert summary["waiting_on_decode_budget_pct"] == pytest.approx(100 * 39 * 4.2 / busy_ms)
    assert summary["waiting_on_prompt_budget_pct"] == pytest.approx(100 * 0.52 / busy_ms)
    assert summary["mean_num_waiting"] == pytest.approx(4 * (0.52 + 39 * 4.2) / busy_ms)
    assert summary["peak_num_waiting"] == 4
    assert summary["waiting_on_kv_blocks_pct"] == summary["waiting_on_max_num_seqs_pct"] == 0


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


def test_the_mode_picks_the_bulk_room_only_when_nobody_reads_every_request():
    """bulk_scheduler.py's classes serve when no observer reads every request and decodes do
    not speculate; otherwise the plain rules (scheduler.py, static_batching.py) serve alone."""
    from bulk_scheduler import AsyncBulkScheduler, BulkScheduler, BulkStaticBatchScheduler
    from scheduler import Scheduler
    from spec_decode import SpeculativeConfig
    from static_batching import StaticBatchScheduler
    from async_scheduling import AsyncScheduler
    config = EngineConfig(max_model_len=256, async_scheduling=False)
    rng = random.Random(0)
    async_config = replace(config, async_scheduling=True)
    assert type(MODES["chunked"].make_scheduler(async_config, 64, rng, True)) is AsyncBulkScheduler
    assert type(MODES["chunked"].make_scheduler(async_config, 64, rng, False)) is AsyncScheduler
    assert type(MODES["chunked"].make_scheduler(config, 64, rng, True)) is BulkScheduler
    assert type(MODES["chunked"].make_scheduler(config, 64, rng, False)) is Scheduler
    assert type(MODES["static"].make_scheduler(config, 64, rng, True)) is BulkStaticBatchScheduler
    assert type(MODES["naive"].make_scheduler(config, 64, rng, False)) is StaticBatchScheduler
    speculating = EngineConfig(max_model_len=256, speculative_config=SpeculativeConfig(
        method="ngram", num_speculative_tokens=2, acceptance_rate=0.5))
    assert type(MODES["chunked"].make_scheduler(speculating, 64, rng, True)) is Scheduler


def test_the_plain_rules_hold_no_bulk_path():
    """The speed room is a room: the rules' files never name the bulk path's bookkeeping (STATIC
    keeps its unfinished members in a RunningDecodes group on both paths), and the engine loop
    asks nothing of it before schedule()."""
    from conftest import ROOT
    bulk_words = ("bulk_decodes", "num_bulk_decodes", "identical_decode_steps",
                  "apply_decode_run", "add_decodes", "_admission_order")
    for name in ("scheduler.py", "static_batching.py", "async_scheduling.py"):
        code = (ROOT / "code" / name).read_text()
        assert not [word for word in bulk_words if word in code], name
    assert "RunningDecodes" not in (ROOT / "code" / "scheduler.py").read_text()
    main = (ROOT / "code" / "main.py").read_text()
    loop = main[main.index("    while True:"):main.index("steps.step(clock_s)")]  # (schedule)
    assert "repeat" not in loop and "bulk" not in loop


def test_runs_keep_output_tokens_per_second_as_a_chart_of_every_step_would():
    """run without a chart keeps one number per second (OutputTokensPerSecond); the peak is the
    one the per-step samples give, counted the way vllm bench serve counts it."""
    from collections import Counter
    from reports.timeseries import OutputTokensPerSecond, StepSeries
    config = EngineConfig(max_model_len=256, default_chunked_budget=64)
    rows = [(0.3 * i, 20 + 37 * i % 200, 1 + 53 * i % 250) for i in range(40)]
    for mode in MODES:
        chart = StepSeries(mode, config.block_size, is_paged=MODES[mode].is_paged)
        per_second = OutputTokensPerSecond()
        recorder = simulate(make_workload(rows), MODES[mode], config, 64, make_clock(config),
                            [chart, per_second])
        start_s = min(record.arrival_s for record in recorder.completed())
        buckets = Counter()
        for end_s, num_tokens in zip(chart.end_s, chart.num_output_tokens):
            buckets[int(end_s - start_s)] += num_tokens
        assert per_second.peak(start_s) == max(buckets.values()) > 0, mode
        assert len(per_second.buckets) <= chart.end_s[-1] - start_s + 1 < len(chart.end_s)


def mooncake_replay(tmp_path, rng: random.Random, num_rows: int, hash_block_size: int):
    """A Mooncake trace of `num_rows` rows whose hash ids are drawn from a few shared openings
    and from ids of their own, replayed through traces/replay.py (which counts the ids that
    more than one row names)."""
    import json
    from traces.replay import trace_workload
    lines, next_own_id = [], 1000
    for index in range(num_rows):
        hash_ids = [rng.randrange(4)] * rng.randint(0, 1) + [4 + rng.randrange(3)]
        for _ in range(rng.randint(0, 3)):
            hash_ids.append(next_own_id)
            next_own_id += 1
        prompt_len = hash_block_size * (len(hash_ids) - 1) + rng.randint(1, hash_block_size)
        lines.append(json.dumps({"timestamp": 40 * index, "input_length": prompt_len,
                                 "output_length": rng.randint(1, 60), "hash_ids": hash_ids}))
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return trace_workload(str(path), hash_block_size=hash_block_size)


def test_blocks_only_their_own_request_names_are_cached_later_on_the_bulk_path_alone(
        tmp_path, monkeypatch):
    """On the bulk path a block past a request's first hash id that no other row names is
    entered in the prefix cache only when that request is preempted (kv_cache.py,
    defers_unshared_blocks): fewer entries made and dropped, every request served at the same
    times as by the rules, which enter every full block of known tokens, synchronous and async,
    on pools small enough to preempt (then the deferred blocks are entered and found again)."""
    from block_pool import BlockPool
    entered = {True: 0, False: 0}
    cache_full_blocks = BlockPool.cache_full_blocks
    path = [True]

    def counted(pool, block_ids, block_hashes):
        entered[path[0]] += len(block_ids)
        cache_full_blocks(pool, block_ids, block_hashes)

    monkeypatch.setattr(BlockPool, "cache_full_blocks", counted)
    num_preempting = 0
    for seed in range(8):
        rng = random.Random(seed)
        config = EngineConfig(block_size=4, max_model_len=256, default_chunked_budget=32,
                              enable_prefix_caching=True,
                              async_scheduling=rng.choice([True, False]))
        workload = mooncake_replay(tmp_path, rng, 40, hash_block_size=8)
        num_blocks = rng.choice([24, 48, 400])
        path[0] = True
        bulk = served(config, num_blocks, None, None, "chunked", [], workload)
        path[0] = False
        rules = served(config, num_blocks, None, None, "chunked", [EveryRequest()], workload)
        assert bulk == rules, f"seed {seed}"
        assert bulk[1]["prefix_cache_hits"] > 0
        num_preempting += bulk[1]["num_preemptions"] > 0
    assert entered[True] < entered[False]
    assert num_preempting >= 2


def test_runs_of_a_prompts_chunks_and_runs_ending_in_a_finish_are_taken_and_change_nothing(
        monkeypatch):
    """The wider runs of the synchronous bulk scheduler: the decodes and the chunks of the one
    prompt behind them, and runs whose last step finishes somebody (freed after it). Both kinds
    are taken here, with and without a chart watching, and every token time and every summary
    figure is the rules' own."""
    from bulk_scheduler import BulkScheduler
    from reports.timeseries import StepSeries
    kinds = set()
    apply_decode_run = BulkScheduler.apply_decode_run

    def noting_the_kind(self, run, step_ends_s):
        finished = apply_decode_run(self, run, step_ends_s)
        kinds.add((run.prompt is not None, bool(finished)))
        return finished

    monkeypatch.setattr(BulkScheduler, "apply_decode_run", noting_the_kind)
    config = EngineConfig(max_model_len=512, default_chunked_budget=64, async_scheduling=False)
    rows = [(0.02 * i, 100 + 97 * i % 300, 5 + 41 * i % 120) for i in range(40)]
    for observers in ([], [StepSeries("chunked", config.block_size)]):
        kinds.clear()
        bulk = served(config, 256, rows, None, "chunked", observers)
        rules = served(config, 256, rows, None, "chunked", [EveryRequest(), *observers])
        assert bulk == rules
        assert {(True, False), (True, True), (False, True)} <= kinds, kinds  # (prompt, finish)


def test_an_arrival_that_only_waits_does_not_end_a_run(monkeypatch):
    """Two decodes and a long prompt chunked behind them: requests arriving while its chunks
    spend the budget can only wait, so the run of chunks goes on through them (synchronous
    scheduling) and no step in the middle of the prompt asks the rules; every request is still
    served as the rules serve it."""
    from bulk_scheduler import BulkScheduler
    config = EngineConfig(max_model_len=2048, default_chunked_budget=64, async_scheduling=False)
    opening = [(0.0, 10, 300), (0.0, 10, 300), (0.0, 1500, 5)]
    records, _ = served(config, 4096, opening, None, "chunked", [])
    first_token_s = records[2].first_token_s  # the long prompt's: its chunks end then
    rows = opening + [(first_token_s * i / 12, 20, 5) for i in range(1, 12)]
    passes = []  # the long prompt's chunk in each step that asked the rules
    original = BulkScheduler.schedule

    def schedule(self, now_s):
        batch = original(self, now_s)
        passes.extend(s for s in batch.scheduled if s.request.request_id == "2")
        return batch

    monkeypatch.setattr(BulkScheduler, "schedule", schedule)
    bulk = served(config, 4096, rows, None, "chunked", [])
    middle = [s for s in passes if 0 < s.num_context_tokens
              and s.num_context_tokens + s.num_new_tokens < 1500]
    assert passes and not middle, [(s.num_context_tokens, s.num_new_tokens) for s in middle]
    assert bulk == served(config, 4096, rows, None, "chunked", [EveryRequest()])


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_an_arrival_behind_a_head_kept_out_does_not_end_a_run(monkeypatch, async_scheduling):
    """Two decodes fill max_num_seqs, a third request waits for a seat: requests arriving
    behind it change nothing, so the decodes' run goes on through them (no pass of the rules
    until the first decode finishes); every request is still served as the rules serve it."""
    from bulk_scheduler import AsyncBulkScheduler, BulkScheduler
    config = EngineConfig(max_model_len=1024, max_num_seqs=2, async_scheduling=async_scheduling)
    opening = [(0.0, 10, 400), (0.0, 10, 400), (0.0, 10, 5)]
    records, _ = served(config, 4096, opening, None, "chunked", [])
    first_end_s = records[0].last_token_s
    rows = opening + [(first_end_s * i / 12, 20, 5) for i in range(1, 12)]
    pass_times_s = []
    scheduler_class = AsyncBulkScheduler if async_scheduling else BulkScheduler
    original = scheduler_class.schedule

    def schedule(self, now_s):
        pass_times_s.append(now_s)
        return original(self, now_s)

    monkeypatch.setattr(scheduler_class, "schedule", schedule)
    bulk = served(config, 4096, rows, None, "chunked", [])
    assert bulk[0][0].last_token_s == first_end_s  # (the arrivals wait: nothing moves)
    during = [t for t in pass_times_s if 0 < t < 0.9 * first_end_s]
    assert len(during) <= 3, during  # the first steps: the opening's prompts, then decodes
    assert bulk == served(config, 4096, rows, None, "chunked", [EveryRequest()])
