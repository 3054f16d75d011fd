"""Async scheduling, step for step equal to vLLM 0.30.0's real AsyncScheduler on recorded scenarios.

tests/data/async_oracle/README.md says how each was recorded: vLLM's AsyncScheduler driven the way
its EngineCore drives it, a batch queue of depth 2. Each step is one schedule() call: the tokens
it scheduled, who it preempted, and the output read in the same pass (the batch before it):
who finished, the free blocks after. Some scenarios also keep what vLLM's synchronous Scheduler
decided on the same workload, which servesim with --no-async-scheduling must match; the
`spec_*` ones speculate (placeholder drafts, rolled back a step later).
"""

import json
from pathlib import Path

import pytest

from oracle_replay import differences, run_servesim, scenarios

DATA = Path(__file__).parent / "data" / "async_oracle"


@pytest.mark.parametrize("path", scenarios(DATA), ids=lambda p: p.stem)
def test_every_step_is_what_vllms_async_scheduler_decided(capsys, tmp_path, path):
    scenario = json.loads(path.read_text())
    code, err, steps = run_servesim(capsys, scenario, tmp_path, async_scheduling=True)
    assert code == 0, err
    assert differences(steps, scenario) == []


@pytest.mark.parametrize("path", [p for p in scenarios(DATA)
                                  if "sync_oracle_steps" in json.loads(p.read_text())],
                         ids=lambda p: p.stem)
def test_without_async_scheduling_every_step_is_what_the_sync_scheduler_decided(capsys, tmp_path,
                                                                                 path):
    scenario = json.loads(path.read_text())
    code, err, steps = run_servesim(capsys, scenario, tmp_path, async_scheduling=False)
    assert code == 0, err
    assert differences(steps, scenario, "sync_oracle_steps") == []
    assert scenario["sync_oracle_steps"] != scenario["oracle_steps"]  # async changed something


def test_the_recorded_scenarios_cover_what_async_changes():
    recorded = [json.loads(path.read_text()) for path in scenarios(DATA)]
    assert {scenario["scheduler"] for scenario in recorded} == {"AsyncScheduler"}
    steps = [step for scenario in recorded for step in scenario["oracle_steps"]]
    assert any(not step["scheduled"] for step in steps)  # everybody's token in flight
    assert any(step["preempted"] for step in steps)
    assert any(s["config"]["enable_prefix_caching"] for s in recorded)
    assert any(s["config"]["enable_chunked_prefill"] for s in recorded)
    assert any(not s["config"]["enable_chunked_prefill"] for s in recorded)
    speculating = [s for s in recorded if s["config"].get("speculative")]
    assert {s["config"]["speculative"]["method"] for s in speculating} == {"eagle3", "draft_model"}
    assert any(step["preempted"] for s in speculating for step in s["oracle_steps"])
    # A request preempted while its last token was in flight finishes while it waits: it is
    # reported finished without being scheduled in that step or the one before.
    finished_waiting = [
        request for scenario in recorded
        for before, step in zip(scenario["oracle_steps"], scenario["oracle_steps"][1:])
        for request in step["finished"]
        if request in before["preempted"] + step["preempted"]]
    assert finished_waiting
