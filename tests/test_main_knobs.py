"""The knob block at the top of code/main.py, edited as a learner edits it, in a copy of code/."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def edited_copy(tmp_path, **knobs):
    """A copy of code/ whose main.py sets each KNOB = value; returns the copy's main.py."""
    copy = tmp_path / "code"
    shutil.copytree(ROOT / "code", copy, ignore=shutil.ignore_patterns("__pycache__"))
    main_py = copy / "main.py"
    text = main_py.read_text(encoding="utf-8")
    for knob, value in knobs.items():
        text, count = re.subn(rf"^{knob} = [^#\n]*?(\s*#|$)", rf"{knob} = {value}\1", text,
                              count=1, flags=re.M)
        assert count == 1, f"no knob {knob} in code/main.py"
    main_py.write_text(text, encoding="utf-8")
    return main_py


def run(main_py, *argv):
    return subprocess.run([sys.executable, str(main_py), *argv], capture_output=True, text=True)


def test_a_chunked_budget_knob_below_max_model_len_runs_and_shows_in_json(tmp_path):
    # CONTINUOUS keeps vLLM's unchunked rule (8192), so a 1024-token slice is no refusal.
    result = run(edited_copy(tmp_path, MAX_NUM_BATCHED_TOKENS=1024), "--format", "json",
                 "--num-prompts", "12")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["default_chunked_budget"] == 1024


def test_the_chunked_budget_knob_changes_what_chunked_prefill_schedules(tmp_path):
    step_logs = []
    for budget in (512, 1024):
        main_py = edited_copy(tmp_path / str(budget), MAX_NUM_BATCHED_TOKENS=budget)
        log = tmp_path / f"steps-{budget}.jsonl"
        assert run(main_py, "run", "--mode", "chunked", "--num-prompts", "12",
                   "--step-log", str(log)).returncode == 0
        step_logs.append([json.loads(line) for line in log.read_text().splitlines()])
    largest_steps = [max(sum(step["scheduled"].values()) for step in log) for log in step_logs]
    assert largest_steps == [512, 1024]


@pytest.mark.parametrize("command", [["run", "--mode", "chunked"], ["sweep", "--request-rates", "1,2"]])
def test_run_and_sweep_honour_the_knobs(tmp_path, command):
    main_py = edited_copy(tmp_path, BLOCK_SIZE=32, MAX_NUM_SEQS=8)
    result = run(main_py, *command, "--num-prompts", "10", "--format", "json")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)["config"]
    assert (config["block_size"], config["max_num_seqs"]) == (32, 8)


def test_a_flag_overrides_its_knob(tmp_path):
    result = run(edited_copy(tmp_path, BLOCK_SIZE=32), "--block-size", "64", "--format", "json",
                 "--num-prompts", "5")
    assert json.loads(result.stdout)["config"]["block_size"] == 64


@pytest.mark.parametrize("knob, value, says", [
    ("BLOCK_SIZE", "0", "BLOCK_SIZE in code/main.py must be 1, 2, 4, 8 or a multiple of 16 in "
                        "[16, 10,000,000] tokens, got 0"),
    ("BLOCK_SIZE", "16.0", "BLOCK_SIZE in code/main.py must be 1, 2, 4, 8 or a multiple of 16"),
    ("MAX_NUM_SEQS", "-1", "MAX_NUM_SEQS in code/main.py must be an integer in [1, 1,000,000]"),
    ("MAX_NUM_BATCHED_TOKENS", "0", "MAX_NUM_BATCHED_TOKENS in code/main.py must be an integer in "
                                    "[1, 10,000,000] tokens, got 0"),
    # vLLM's SchedulerConfig: a step's budget must hold a token for each of max_num_seqs.
    ("MAX_NUM_SEQS", "1024", "MAX_NUM_BATCHED_TOKENS in code/main.py 512 is below MAX_NUM_SEQS "
                             "in code/main.py 1024"),
    ("COMPARED_MODES", '["turbo"]', "unknown COMPARED_MODES in code/main.py 'turbo'"),
])
def test_a_refusal_caused_by_a_knob_names_the_knob(tmp_path, knob, value, says):
    result = run(edited_copy(tmp_path, **{knob: value}), "--num-prompts", "5")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and says in lines[0], result.stderr
