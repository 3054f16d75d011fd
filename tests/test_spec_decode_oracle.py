"""Speculative decoding, step for step equal to vLLM 0.30.0's real scheduler on recorded scenarios.

tests/data/spec_oracle/README.md says how each was recorded (vLLM's synchronous Scheduler, so
servesim runs with --no-async-scheduling). Among them: one-token admissions padded to 1 + k
(with and without prefix caching), a padded admission that does not fit the budget left and
keeps everybody behind it out, requests preempted after accepted drafts filled a block (freed
unhashed, so found again by nobody), and the threshold vLLM cannot run.
"""

import json
from pathlib import Path

import pytest

from oracle_replay import differences, run_servesim, scenarios

DATA = Path(__file__).parent / "data" / "spec_oracle"


@pytest.mark.parametrize("path", scenarios(DATA), ids=lambda p: p.stem)
def test_every_step_is_what_vllms_scheduler_decided(capsys, tmp_path, path):
    scenario = json.loads(path.read_text())
    code, err, steps = run_servesim(capsys, scenario, tmp_path, async_scheduling=False)
    if "crash" in scenario:  # vLLM started, then failed its own assertion: servesim refuses
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "long-prefill-token-threshold" in err and "1 + k" in err
        return
    assert code == 0, err
    assert differences(steps, scenario) == []


def test_the_recorded_scenarios_cover_the_rules():
    recorded = [json.loads(path.read_text()) for path in scenarios(DATA)]
    runs = [scenario for scenario in recorded if "crash" not in scenario]
    steps = [step for scenario in runs for step in scenario["oracle_steps"]]
    k_of = {id(s): s["config"]["speculative"]["num_speculative_tokens"] for s in runs}
    padded = [scenario for scenario in runs for step in scenario["oracle_steps"]
              for n, (drafts, accepted) in step["spec"].items()
              if drafts == k_of[id(scenario)] and accepted == 0
              and [n, 1 + drafts] in step["scheduled"]]
    assert any(s["config"]["enable_prefix_caching"] for s in padded)
    assert any(not s["config"]["enable_prefix_caching"] for s in padded)
    assert any(step["preempted"] for step in steps)
    caching_and_preempting = [s for s in runs if s["config"]["enable_prefix_caching"]
                              and any(step["preempted"] for step in s["oracle_steps"])]
    assert any(hit for s in caching_and_preempting for step in s["oracle_steps"]
               for hit in step["hits"].values())
    assert {s["config"]["speculative"]["method"] for s in runs} == {"ngram", "eagle3",
                                                                     "draft_model"}
    assert any("AssertionError" in scenario.get("crash", "") for scenario in recorded)
