"""Many engines on one clock (cluster.py, router.py, disaggregation.py): one replica is today's
engine; N replicas serve N times the load; routers and P/D disaggregation do what they claim."""

import json
from functools import partial

import pytest

import main
from cluster import STEP, ClusterSpec, simulate_cluster
from commands import cli
from conftest import make_workload, servesim_here

CLUSTER_KEYS = ("replica", "routed", "replicas")  # what a cluster adds to lines and results


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


COMMANDS = [
    ["run", "--num-prompts", "40", "--format", "json"],
    ["run", "--num-prompts", "30", "--mode", "continuous", "--request-rate", "inf",
     "--format", "json"],
    ["run", "--num-prompts", "20", "--mode", "static", "--format", "json"],
    ["compare", "--num-prompts", "20", "--format", "json"],
    ["run", "--num-prompts", "40", "--dataset-name", "prefix_repetition", "--format", "json"],
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
