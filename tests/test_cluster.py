"""Many engines on one clock (cluster.py, router.py, disaggregation.py): one replica is today's
engine; N replicas serve N times the load; routers and P/D disaggregation do what they claim."""

import json
from functools import partial

import pytest

import main
from cluster import STEP, ClusterSpec, simulate_cluster
from commands import cli
from conftest import make_workload, servesim_here

CLUSTER_KEYS = ("replica", "routed", "replicas", "cluster")  # what a cluster adds to the output


def run_here(capsys, simulate, *argv):
    code = cli.main(list(argv), simulate, main.knobs())
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def without_cluster_keys(text: str) -> str:
    """JSON (one document or one per line) with the keys a cluster adds taken out."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in CLUSTER_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    text = text.strip()
    if text.startswith("{") and "\n{" in text:
        return "\n".join(json.dumps(strip(json.loads(line))) for line in text.splitlines())
    return json.dumps(strip(json.loads(text)))


# The cluster's loop is the synchronous one (each replica's scheduler is): the same engine as
# main.simulate's with --no-async-scheduling.
COMMANDS = [
    ["run", "--num-prompts", "40", "--format", "json", "--no-async-scheduling"],
    ["run", "--num-prompts", "30", "--mode", "continuous", "--request-rate", "inf",
     "--format", "json", "--no-async-scheduling"],
    ["run", "--num-prompts", "20", "--mode", "static", "--format", "json",
     "--no-async-scheduling"],
    ["compare", "--num-prompts", "20", "--format", "json", "--no-async-scheduling"],
    ["run", "--num-prompts", "40", "--dataset-name", "prefix_repetition", "--format", "json",
     "--no-async-scheduling"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:4]))
def test_one_replica_through_the_cluster_loop_is_todays_engine(capsys, tmp_path, argv):
    """The cluster's own loop over one replica gives main.simulate's results and step log."""
    plain_log, cluster_log = tmp_path / "plain.jsonl", tmp_path / "cluster.jsonl"
    code, plain, _ = run_here(capsys, main.simulate, *argv, "--step-log", str(plain_log))
    assert code == 0
    code, clustered, _ = run_here(capsys, partial(simulate_cluster, ClusterSpec()), *argv,
                                  "--step-log", str(cluster_log))
    assert code == 0
    assert without_cluster_keys(clustered) == without_cluster_keys(plain)
    assert (without_cluster_keys(cluster_log.read_text())
            == without_cluster_keys(plain_log.read_text()))
    assert '"replica": 0' in cluster_log.read_text()


def test_data_parallel_size_1_prints_todays_bytes(capsys, tmp_path):
    for argv in (["run", "--num-prompts", "30"], ["compare", "--num-prompts", "20"],
                 ["run", "--num-prompts", "30", "--format", "json"]):
        logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
        _, before, _ = servesim_here(capsys, *argv, "--step-log", str(logs[0]))
        _, after, _ = servesim_here(capsys, *argv, "--data-parallel-size", "1",
                                    "--step-log", str(logs[1]))
        assert after == before
        assert logs[1].read_bytes() == logs[0].read_bytes()


def results(capsys, *argv) -> dict:
    code, out, err = servesim_here(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)["results"][0]


STEADY = ["run", "--dataset-name", "random", "--random-input-len", "256",
          "--random-output-len", "64", "--seed", "3"]


def test_four_round_robin_replicas_serve_four_times_the_load_at_the_same_latency(capsys):
    one = results(capsys, *STEADY, "--num-prompts", "40", "--request-rate", "4")
    four = results(capsys, *STEADY, "--num-prompts", "160", "--request-rate", "16",
                   "--data-parallel-size", "4")
    assert 3.5 < four["output_throughput"] / one["output_throughput"] < 4.5
    assert four["mean_ttft_ms"] < 1.3 * one["mean_ttft_ms"]
    assert four["mean_tpot_ms"] < 1.3 * one["mean_tpot_ms"]
    assert [r["requests"] for r in four["replicas"]] == [40, 40, 40, 40]


def test_too_few_replicas_queue_up_and_enough_do_not(capsys):
    """One load, 1 to 8 replicas: the queue (and TTFT) shrinks until there are enough, then
    stays put: the sweep shows where."""
    sweep = {n: results(capsys, *STEADY, "--num-prompts", "120", "--request-rate", "30",
                        "--data-parallel-size", str(n)) for n in (1, 2, 4, 8)}
    ttft = {n: r["mean_ttft_ms"] for n, r in sweep.items()}
    assert ttft[1] > 3 * ttft[4]                   # one engine: the queue grows
    assert sweep[1]["peak_num_waiting"] > 10 * max(1, sweep[8]["peak_num_waiting"])
    assert abs(ttft[8] - ttft[4]) < 0.3 * ttft[4]  # enough: more replicas change little


MOONCAKE_SLICE = "tests/data/mooncake_conversation_first200.jsonl.gz"  # its source beside it


def test_on_mooncake_prefix_aware_routing_hits_more_and_answers_sooner(capsys, tmp_path):
    from conftest import ROOT
    trace = str(ROOT / MOONCAKE_SLICE)
    runs = {router: results(capsys, "run", "--trace", trace, "--data-parallel-size", "4",
                            "--router", router)
            for router in ("round-robin", "least-loaded", "prefix-aware")}
    aware = runs.pop("prefix-aware")
    for other in runs.values():
        assert aware["prefix_cache_hit_rate"] > other["prefix_cache_hit_rate"]
        assert aware["mean_ttft_ms"] < other["mean_ttft_ms"]


def test_the_step_log_records_each_routing_decision(capsys, tmp_path):
    log = tmp_path / "steps.jsonl"
    code, _, err = servesim_here(capsys, *STEADY, "--num-prompts", "12", "--data-parallel-size",
                                 "3", "--router", "least-loaded", "--step-log", str(log))
    assert code == 0, err
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    routed = {rid: (line["replica"], why) for line in lines for rid, why in line["routed"].items()}
    assert sorted(routed, key=int) == [str(i) for i in range(12)]
    assert all(why.startswith("least-loaded: ") for _, why in routed.values())
    assert {replica for replica, _ in routed.values()} == {0, 1, 2}
    starts = [line["time_s"] for line in lines]
    assert starts == sorted(starts)  # the cluster's steps, in the order they began


LONG = ["run", "--dataset-name", "random", "--random-input-len", "4000", "--random-output-len",
        "200", "--random-range-ratio", "0.5", "--num-prompts", "30", "--request-rate", "0.2"]
SHORT = ["run", "--dataset-name", "random", "--random-input-len", "128", "--random-output-len",
         "256", "--random-range-ratio", "0.5", "--num-prompts", "40", "--request-rate", "2"]


def test_long_prompts_disaggregated_cut_the_itl_tail_and_cost_ttft_about_the_transfer(capsys):
    pd = results(capsys, *LONG, "--pd", "1:1")
    aggregated = results(capsys, *LONG, "--data-parallel-size", "2")  # chunked prefill
    assert pd["p99_itl_ms"] < 0.5 * aggregated["p99_itl_ms"]
    transfer_ms = pd["disaggregation"]["mean_kv_transfer_ms"]
    assert transfer_ms > 0
    # TTFT pays the transfer, the decode engine's one step for the last prompt token, and a
    # little queueing at the one prefill engine: a few transfers' worth, no more.
    assert transfer_ms < pd["mean_ttft_ms"] - aggregated["mean_ttft_ms"] < 4 * transfer_ms


def test_short_prompts_disaggregated_do_not_pay(capsys):
    pd = results(capsys, *SHORT, "--pd", "1:1")
    aggregated = results(capsys, *SHORT, "--data-parallel-size", "2")
    assert pd["mean_ttft_ms"] > aggregated["mean_ttft_ms"]        # slower to answer ...
    assert pd["p99_itl_ms"] > 0.6 * aggregated["p99_itl_ms"]      # ... for a small ITL gain
    assert pd["output_throughput"] <= 1.01 * aggregated["output_throughput"]


def test_a_full_decode_pool_makes_the_transfer_wait(capsys):
    pd = results(capsys, *LONG, "--request-rate", "inf", "--num-prompts", "12", "--pd", "2:1",
                 "--num-gpu-blocks-override", "1200", "--max-model-len", "8192")
    assert pd["disaggregation"]["mean_kv_transfer_wait_ms"] > 0
    assert pd["completed"] == 12


@pytest.mark.parametrize("argv, says", [
    (["--pd", "1:1", "--mode", "static"], "has none"),
    (["--pd", "1:1", "--mode", "naive"], "has none"),
    (["--pd", "1:1", "--num-gpu-blocks-override", "10"], "less than one --max-model-len"),
    (["--pd", "1:1", "--kv-transfer-bandwidth", "0"], "positive number of GB/s"),
    (["--pd", "0:1"], "at least one prefill"),
    (["--pd", "1-1"], "give P:D"),
    (["--data-parallel-size", "0"], "integer in [1, 64]"),
    (["--kv-transfer-bandwidth", "nvlink"], "with --pd"),
    (["--pd", "1:1", "--data-parallel-size", "2"], "leave out"),
    (["--router", "prefix-aware"], "picks among replicas"),
    (["--data-parallel-size", "2", "--block-table", "1"], "its own physical blocks"),
])
def test_bad_combinations_are_one_line_and_exit_2(capsys, argv, says):
    code, out, err = servesim_here(capsys, "run", "--num-prompts", "4", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_timeline_and_svg_draw_one_lane_per_replica(capsys, tmp_path):
    svg = tmp_path / "pd.svg"
    code, out, err = servesim_here(capsys, *SHORT, "--num-prompts", "8", "--pd", "1:2",
                                   "--timeline", "4", "--svg", str(svg))
    assert code == 0, err
    for index in range(3):
        assert f"CONTINUOUS+CHUNKED, replica {index}: steps" in out
        assert f"CONTINUOUS+CHUNKED, replica {index}</text>" in svg.read_text()
    assert "   prefill " in out and "    decode " in out  # the per-replica table's roles


def test_compare_sets_aggregated_and_disaggregated_side_by_side(capsys):
    code, out, err = servesim_here(capsys, "compare", *LONG[1:], "--mode", "chunked",
                                   "--pd", "1:1", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert [(row["mode"], row["engines"]) for row in rows] == [
        ("CONTINUOUS+CHUNKED", "x2"), ("CONTINUOUS+CHUNKED", "1P:1D")]
    assert [len(row["replicas"]) for row in rows] == [2, 2]
    assert rows[0]["cluster"] == {"data_parallel_size": 2, "router": "round-robin"}
    assert rows[1]["cluster"]["kv_transfer_link"] == "infiniband"
    assert "disaggregation" in rows[1] and "disaggregation" not in rows[0]


def test_shared_prefixes_stay_on_the_replica_that_caches_them(capsys):
    """8 prefixes over 4 replicas: round-robin and least-loaded compute each prefix on every
    replica; prefix-aware sends each to the one that holds it, with the load kept even."""
    workload = ["run", "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len",
                "2048", "--prefix-repetition-num-prefixes", "8", "--num-prompts", "96",
                "--request-rate", "12", "--data-parallel-size", "4"]
    runs = {router: results(capsys, *workload, "--router", router)
            for router in ("round-robin", "least-loaded", "prefix-aware")}
    aware = runs.pop("prefix-aware")
    for other in runs.values():
        assert aware["prefix_cache_hit_rate"] > other["prefix_cache_hit_rate"] + 10
        assert aware["mean_ttft_ms"] < 0.7 * other["mean_ttft_ms"]
    assert max(r["requests"] for r in aware["replicas"]) < 2 * 96 / 4  # not all on one


class FakeReplica:
    """What the routers read of a replica: its queue, its batch and its KV cache's use."""

    def __init__(self, num_waiting, num_running, kv_used_pct=0):
        from kv_cache import PagedKVCache
        self.num_waiting, self.num_running = num_waiting, num_running
        kv_cache = PagedKVCache(100, 16)
        kv_cache.pool.take(kv_used_pct)

        class Scheduler:
            pass
        self.scheduler = Scheduler()
        self.scheduler.kv_cache = kv_cache


def test_least_loaded_counts_waiting_plus_running_and_breaks_ties_in_turn():
    from router import LeastLoaded
    router = LeastLoaded()
    even = [FakeReplica(0, 2), FakeReplica(0, 2), FakeReplica(0, 2)]
    assert [router.choose(None, even)[0] for _ in range(4)] == [0, 1, 2, 0]  # ties in turn
    assert LeastLoaded().choose(None, [FakeReplica(1, 1), FakeReplica(0, 3)])[0] == 0  # 2 < 3
    # Over half its KV in use, a replica's waiting requests weigh more (90%: 1 + 6 x 0.4 each).
    loaded = [FakeReplica(1, 1, kv_used_pct=90), FakeReplica(0, 3)]
    assert LeastLoaded().choose(None, loaded)[0] == 1


def test_events_at_one_instant_go_arrivals_first_then_replicas_by_index(capsys, tmp_path):
    """Four requests at t=0 over two replicas: round-robin sends 0, 2 to replica 0 and 1, 3 to
    replica 1; both replicas' first steps start at t=0, replica 0's first, each admitting what
    arrived at that instant."""
    log = tmp_path / "steps.jsonl"
    code, _, err = servesim_here(capsys, *STEADY, "--num-prompts", "4", "--request-rate", "inf",
                                 "--data-parallel-size", "2", "--step-log", str(log))
    assert code == 0, err
    first, second = [json.loads(line) for line in log.read_text().splitlines()[:2]]
    assert (first["time_s"], first["replica"], sorted(first["scheduled"])) == (0.0, 0, ["0", "2"])
    assert (second["time_s"], second["replica"], sorted(second["scheduled"])) == (0.0, 1,
                                                                                   ["1", "3"])
    assert first["routed"] == {"0": "round-robin", "2": "round-robin"}


def test_compare_pd_refuses_one_step_log_for_two_clusters(capsys, tmp_path):
    log = tmp_path / "steps.jsonl"
    code, out, err = servesim_here(capsys, "compare", "--num-prompts", "4", "--mode", "chunked",
                                   "--pd", "1:1", "--step-log", str(log))
    assert code == 2 and out == "" and "would mix" in err and not log.exists()
