"""recommend: the fewest GPUs that carry a target load within the SLO, over GPU types, tensor
parallelism and replicas; each option meets the SLO and one replica fewer does not; bad targets
get one line."""

import contextlib
import functools
import io
import json

import pytest

import main
from commands import cli
from commands.recommend import replica_share
from commands.tuning import SLO_ATTAINMENT_PCT
from workload import random_workload

EIGHT_B_ON_H100S = ["--model", "llama-3.1-8b", "--gpus", "h100-sxm5", "--dataset-name",
                    "random", "--random-input-len", "1000", "--random-output-len", "300"]


def run_here(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv), main.simulate, main.knobs())
        except SystemExit as exit_:  # argparse's own refusals
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


@functools.lru_cache(maxsize=None)
def printed_json(*argv) -> str:
    code, out, err = run_here("recommend", *argv, "--format", "json")
    assert code == 0, err
    return out


def recommended(*argv) -> dict:
    """recommend's JSON for argv (served once per argv in this file)."""
    return json.loads(printed_json(*argv))


def test_eight_b_past_one_h100_is_served_by_replicas_with_a_pareto_front():
    found = recommended(*EIGHT_B_ON_H100S, "--target-rate", "60")
    best = found["recommended"]
    assert best["num_gpus"] > 1 and best["replicas"] > 1 and best["tensor_parallel_size"] == 1
    options = found["options"]
    assert all(o["slo_met_pct"] >= SLO_ATTAINMENT_PCT for o in options)
    assert [o["num_gpus"] for o in options] == sorted(o["num_gpus"] for o in options)
    assert options[0]["pareto"]
    for option in options:  # on the front: nothing as cheap is faster
        beaten = any(other["num_gpus"] <= option["num_gpus"]
                     and other["mean_tpot_ms"] < option["mean_tpot_ms"] for other in options)
        assert option["pareto"] == (not beaten)


def test_prefill_decode_splits_are_served_on_as_many_engines_and_one_fewer():
    found = recommended(*EIGHT_B_ON_H100S, "--target-rate", "60")
    replicas = min((o for o in found["options"] if o["pd"] is None),
                   key=lambda o: (o["num_gpus"], o["mean_tpot_ms"]))["replicas"]
    splits = [o for o in found["options"] if o["pd"]] + found["disaggregated_missed"]
    assert splits and replicas >= 2
    for split in splits:
        num_prefill, num_decode = map(int, split["pd"].split(":"))
        assert num_prefill + num_decode == split["replicas"] in (replicas, replicas - 1)
    assert all(o["slo_met_pct"] < SLO_ATTAINMENT_PCT for o in found["disaggregated_missed"])


def test_one_replica_fewer_than_each_option_misses_the_slo():
    for option in recommended(*EIGHT_B_ON_H100S, "--target-rate", "60")["options"]:
        if option["pd"]:
            continue  # a split: the replicas beside it say how few engines carry the load
        if option["replicas"] > 1:
            assert option["one_fewer_slo_met_pct"] < SLO_ATTAINMENT_PCT
        else:
            assert option["one_fewer_slo_met_pct"] is None


def test_a_round_robin_share_is_every_nth_request_at_its_own_arrival_time():
    workload = random_workload(100, 10, 0.0, num_prompts=10, request_rate=10.0)
    every = [r.request_id for r in workload.make_requests()]
    shares = [[r.request_id for r in replica_share(workload, i, 3).make_requests()]
              for i in range(3)]
    assert shares == [every[0::3], every[1::3], every[2::3]]


@pytest.mark.parametrize("argv, says", [
    (["--target-rate", "0"], "--target-rate must be"),
    (["--target-concurrency", "0"], "--target-concurrency must be"),
    (["--target-rate", "5", "--request-rate", "5"], "recommend sets --request-rate itself"),
    (["--target-rate", "5", "--gpus", "h100,tpu"], "unknown --gpus h100,tpu"),
    ([], "one of the arguments --target-rate --target-concurrency is required"),
])
def test_a_bad_target_is_refused_in_one_line(argv, says):
    code, out, err = run_here("recommend", "--model", "llama-3.1-8b", *argv)
    assert (code, out) == (2, "") and says in err and err.count("\n") == 1
