"""Async scheduling's rules (async_scheduling.py), each seen in a step log beside the sync one.

tests/test_async_scheduling_oracle.py replays scenarios recorded from vLLM's AsyncScheduler; these small ones
name one rule each.
"""

import json

import pytest

from conftest import servesim_here

LINEAR = ("--forward-model", "linear", "--linear-step-ms", "1", "--linear-prefill-token-ms",
          "0.01", "--linear-decode-token-ms", "0.5")


def step_log(capsys, tmp_path, rows, *flags) -> list[dict]:
    trace, log = tmp_path / "t.csv", tmp_path / "steps.jsonl"
    trace.write_text("id,arrival_s,prompt_len,output_len\n" + "".join(f"{r}\n" for r in rows))
    code, _, err = servesim_here(capsys, "run", "--trace", str(trace), "--step-log", str(log),
                                 "--format", "json", *flags)
    assert code == 0, err
    return [json.loads(line) for line in log.read_text().splitlines()]


def finish_steps(lines) -> dict:
    return {request: line["step"] for line in lines for request in line["finished"]}


def test_a_finish_is_seen_one_step_later_and_the_last_step_holds_nobody(capsys, tmp_path):
    rows = ["a,0.0,700,2", "b,0.0,100,3"]
    sync = step_log(capsys, tmp_path, rows, "--mode", "chunked", "--no-async-scheduling")
    async_ = step_log(capsys, tmp_path, rows, "--mode", "chunked", "--async-scheduling")
    assert [line["scheduled"] for line in async_ if line["scheduled"]] == [
        line["scheduled"] for line in sync]  # the same work, in the same order
    assert {r: step + 1 for r, step in finish_steps(sync).items()} == finish_steps(async_)
    last = async_[-1]  # b's last token was in flight: nobody left to compute, nothing priced
    assert last["scheduled"] == {} and last["step_ms"] == 0 and last["finished"] == ["b"]


def test_the_next_batch_is_scheduled_before_the_previous_output_so_an_arrival_waits_a_step(
        capsys, tmp_path):
    rows = ["a,0.0,10,4", "b,0.0005,10,1"]  # b arrives while a's prompt runs (1.1 ms)
    sync = step_log(capsys, tmp_path, rows, "--mode", "continuous", "--no-async-scheduling",
                    "--no-enable-prefix-caching", *LINEAR)
    async_ = step_log(capsys, tmp_path, rows, "--mode", "continuous", "--async-scheduling",
                      "--no-enable-prefix-caching", *LINEAR)
    admitted = {line["step"] for line in sync if "b" in line["scheduled"]}
    assert min(admitted) == 1
    assert min(line["step"] for line in async_ if "b" in line["scheduled"]) == 2
    # step 1 was scheduled at 0 s, before step 0 ended; it runs when step 0 ends
    assert async_[1]["scheduled"] == {"a": 1}
    assert async_[1]["time_s"] == pytest.approx(async_[0]["step_ms"] / 1000, abs=1e-6)


def test_servesims_own_modes_run_one_step_at_a_time_whatever_the_flag(capsys, tmp_path):
    rows = ["a,0.0,300,6", "b,0.001,40,9", "c,0.002,900,3"]
    for mode in ("naive", "static"):
        assert (step_log(capsys, tmp_path, rows, "--mode", mode, "--async-scheduling")
                == step_log(capsys, tmp_path, rows, "--mode", mode, "--no-async-scheduling"))


NGRAM = ('{"method": "ngram", "num_speculative_tokens": 3}', "--spec-acceptance-rate", "0.6")
DRAFT_MODEL = ('{"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 3}',
               "--model", "llama-3.1-8b")


def test_ngram_drafts_are_scheduled_synchronously_as_vllm_does_by_default(capsys, tmp_path):
    rows = ["a,0.0,300,6", "b,0.001,40,9", "c,0.002,900,3"]
    spec = ("--mode", "chunked", "--speculative-config", *NGRAM)
    assert (step_log(capsys, tmp_path, rows, *spec)
            == step_log(capsys, tmp_path, rows, *spec, "--no-async-scheduling"))
    draft = ("--mode", "chunked", "--speculative-config", *DRAFT_MODEL)  # async: finishes later
    async_, sync = (step_log(capsys, tmp_path, rows, *draft),
                    step_log(capsys, tmp_path, rows, *draft, "--no-async-scheduling"))
    assert all(step > finish_steps(sync)[r] for r, step in finish_steps(async_).items())


def test_async_scheduling_is_on_by_default_in_the_continuous_modes(capsys, tmp_path):
    rows = ["a,0.0,700,2", "b,0.0,100,3"]
    assert (step_log(capsys, tmp_path, rows, "--mode", "chunked")
            == step_log(capsys, tmp_path, rows, "--mode", "chunked", "--async-scheduling"))


def test_async_scheduling_asked_with_ngram_drafts_is_refused_as_vllm_refuses_it(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,prompt_len,output_len\na,0.0,10,2\n")
    ngram = ("run", "--trace", str(trace), "--speculative-config",
             '{"method": "ngram", "num_speculative_tokens": 3}', "--spec-acceptance-rate", "0.5")
    code, out, err = servesim_here(capsys, *ngram, "--async-scheduling")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--async-scheduling" in err and "ngram" in err
    assert servesim_here(capsys, *ngram)[0] == 0  # left to the default: synchronous
