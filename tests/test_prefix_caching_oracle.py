"""Prefix caching, step for step equal to vLLM 0.30.0's real scheduler on recorded scenarios.

tests/data/prefix_oracle/README.md says how each scenario was recorded. Each is replayed here
through servesim's command line, as a Mooncake JSON-lines trace with the same token ids, on the
linear clock the oracle ran on, and compared at every step: the tokens scheduled per request in
order, who was preempted and finished, the free blocks after the step (free blocks still holding
a cache entry count as free, as in vLLM), and the prompt tokens each admitted request found.
"""

import json
from pathlib import Path

import pytest

from conftest import servesim_here
from oracle_replay import SAMPLED_TOKEN_ID, engine_flags

DATA = Path(__file__).parent / "data" / "prefix_oracle"


def mooncake_trace(workload: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as file:
        for request in workload:
            row = {"timestamp": request["arrival_time"] * 1000, "id": request["id"],
                   "input_length": request["prompt_len"], "output_length": request["output_len"],
                   "output_token_ids": [SAMPLED_TOKEN_ID] * request["output_len"]}
            for key in ("hash_ids", "prompt_token_ids"):
                if key in request:
                    row[key] = request[key]
            file.write(json.dumps(row) + "\n")


def servesim_steps(capsys, scenario: dict, tmp_path: Path) -> list[dict]:
    config = scenario["config"]
    trace, log = tmp_path / "trace.jsonl", tmp_path / "steps.jsonl"
    mooncake_trace(scenario["workload"], trace)
    code, _, err = servesim_here(
        capsys, "run", "--trace", str(trace), "--step-log", str(log), "--format", "json",
        *engine_flags(config, scenario["max_model_len"]),
        "--hash-block-size", str(config.get("hash_block_tokens", 512)),
        "--no-async-scheduling")  # recorded with vLLM's synchronous Scheduler
    assert code == 0, err
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.stem)
def test_every_step_is_what_vllms_scheduler_decided(capsys, tmp_path, path):
    scenario = json.loads(path.read_text())
    ours = servesim_steps(capsys, scenario, tmp_path)
    theirs = scenario["oracle_steps"]
    assert len(ours) == len(theirs)
    for index, (step, oracle) in enumerate(zip(ours, theirs)):
        assert [list(item) for item in step["scheduled"].items()] == oracle["scheduled"], index
        assert step["preempted"] == oracle["preempted"], index
        assert sorted(step["finished"]) == sorted(oracle["finished"]), index
        assert step["num_free_blocks"] == oracle["free_blocks"], index
        assert step["cached_tokens"] == oracle["hits"], index


def test_the_recorded_scenarios_cover_the_rules():
    scenarios = [json.loads(path.read_text()) for path in DATA.glob("*.json")]
    steps = [step for scenario in scenarios for step in scenario["oracle_steps"]]
    assert any(step["preempted"] for step in steps)
    assert any(hit for step in steps for hit in step["hits"].values())
    assert any(not scenario["config"]["enable_chunked_prefill"] for scenario in scenarios)
    assert any("hash_ids" in request for scenario in scenarios for request in scenario["workload"])
