"""Replaying a trace through the engine: its span, and one client at a time.

With `--max-concurrency 1` only one request is ever in flight, so a continuous-batching engine
serves exactly as NAIVE does: the same steps, every token at the same virtual time. What differs
is only what "arrival" means: an open-loop NAIVE request waits in the server's queue, and that
wait is in its TTFT; a closed-loop client waits at home and sends later, so it is not.
"""

import pytest

import main
from config import EngineConfig
from conftest import ROOT, servesim
from forward_model import make_clock
from gpu_memory import plan_memory
from modes import MODES
from metrics import REJECTED
from traces.replay import trace_workload


# Arrivals 0, 0.01, 0.02 s queue up behind each other; the 9,000-token prompt is rejected.
QUEUEING_TRACE = ("arrival_s,prompt_len,output_len\n"
                  "0.00,900,12\n"
                  "0.01,300,20\n"
                  "0.02,9000,5\n"
                  "0.02,600,8\n"
                  "3.00,100,6\n")
# Every key of a run's summary but the KV ones (paged blocks vs contiguous reservations).
KV_KEYS = {"kv_waste_pct", "peak_kv_usage_pct", "mean_kv_usage_pct",
           # and the prefix cache NAIVE does not keep
           "prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate",
           "prefix_cache_resumed_queries", "prefix_cache_resumed_hits"}


def write(tmp_path, text: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return str(path)


def serve(workload, mode_name: str):
    # A token budget that holds every prompt, so that chunked prefill never cuts one.
    # Synchronous scheduling, as NAIVE's: with async scheduling a client learns of its finish
    # a step later (async_scheduling.py), so one client at a time would not match NAIVE.
    config = EngineConfig(max_num_batched_tokens=8192, async_scheduling=False)
    return main.simulate(workload, MODES[mode_name], config, plan_memory(config).num_gpu_blocks,
                         make_clock(config))


def token_times(recorder) -> list:
    """Per request, in arrival order: how it ended, its first and last token times, its outputs."""
    records = [recorder.record(i) for i in range(len(recorder.status))]
    return [(r.status, r.first_token_s, r.last_token_s, r.num_output_tokens) for r in records]


@pytest.mark.parametrize("time_scale", [1.0, 2.0])
def test_a_replay_lasts_at_least_the_trace_span(tmp_path, time_scale):
    workload = trace_workload(write(tmp_path, QUEUEING_TRACE), time_scale=time_scale)
    assert workload.params["trace_span_s"] == 3.0 * time_scale
    for mode_name in MODES:
        assert serve(workload, mode_name).summary()["duration"] >= 3.0 * time_scale


@pytest.mark.parametrize("mode_name", ["continuous", "chunked"])
def test_one_client_at_a_time_is_served_exactly_as_naive(tmp_path, mode_name):
    path = write(tmp_path, QUEUEING_TRACE)
    naive = serve(trace_workload(path), "naive")
    one_client = serve(trace_workload(path, max_concurrency=1), mode_name)

    assert token_times(one_client) == token_times(naive)  # every request, every token time
    assert token_times(naive)[2][0] == REJECTED
    naive_summary, client_summary = naive.summary(), one_client.summary()
    for key in ("duration", "num_steps", "total_output_tokens", "output_throughput",
                "mean_tpot_ms", "p99_itl_ms"):
        assert client_summary[key] == naive_summary[key]
    # The queue NAIVE's requests waited in is the wait the closed-loop clients spent unsent.
    assert client_summary["mean_ttft_ms"] < naive_summary["mean_ttft_ms"]


@pytest.mark.parametrize("mode_name", ["continuous", "chunked"])
def test_with_one_client_on_both_sides_every_metric_but_kv_is_equal(tmp_path, mode_name):
    path = write(tmp_path, QUEUEING_TRACE)
    naive = serve(trace_workload(path, max_concurrency=1), "naive").summary()
    continuous = serve(trace_workload(path, max_concurrency=1), mode_name).summary()
    assert {k: v for k, v in continuous.items() if k not in KV_KEYS} == \
           {k: v for k, v in naive.items() if k not in KV_KEYS}


def test_bad_trace_exits_2_with_one_line_and_writes_nothing(tmp_path):
    path = write(tmp_path, QUEUEING_TRACE + "1.0,50,x\n")
    step_log = tmp_path / "steps.jsonl"
    run = servesim("--trace", path, "--step-log", str(step_log))
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr == (f"servesim: error: {path}:7: output_len must be a whole number of "
                          "tokens, got 'x'\n")
    assert list(tmp_path.iterdir()) == [tmp_path / "trace.csv"]  # no step log, no partial file


def mooncake_rows(tmp_path, rows: list[list[int]]) -> str:
    """A Mooncake trace of one row per hash-id list, each prompt 10 tokens into its last id."""
    import json
    lines = [json.dumps({"timestamp": i, "input_length": 16 * (len(ids) - 1) + 10,
                         "output_length": 4, "hash_ids": ids}) for i, ids in enumerate(rows)]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_replay_knows_where_each_prompt_stops_sharing_hash_ids_with_the_others(tmp_path):
    """The first pass counts the rows naming each hash id; a request's shared_length is its
    prompt up to its first id no other replayed row names (None: every id is shared). Rows past
    --num-prompts are not replayed, so they share nothing."""
    path = mooncake_rows(tmp_path, [[1, 2, 3], [1, 2, 4, 5], [1, 6], [2, 3], [7, 1]])
    contents = [r.content for r in trace_workload(path, hash_block_size=16).make_requests()]
    assert [c.shared_length for c in contents] == [None, 32, 16, None, 0]
    assert [c.num_shared_tokens for c in contents] == [42, 32, 16, 26, 0]
    assert [c.known_length for c in contents] == [42, 58, 26, 26, 26]  # the router's: all
    first_three = trace_workload(path, num_prompts=3, hash_block_size=16).make_requests()
    assert [r.content.shared_length for r in first_three] == [32, 32, 16]


def test_too_many_hash_ids_to_count_leave_every_block_shared(tmp_path, monkeypatch):
    import traces.replay
    monkeypatch.setattr(traces.replay, "MAX_COUNTED_HASH_IDS", 4)
    path = mooncake_rows(tmp_path, [[1, 2, 3], [1, 2, 4, 5], [1, 6], [2, 3], [7, 1]])
    contents = [r.content for r in trace_workload(path, hash_block_size=16).make_requests()]
    assert [c.shared_length for c in contents] == [None] * 5
