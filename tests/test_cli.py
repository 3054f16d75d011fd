"""The command line as a user meets it: determinism, JSON fields, bad input, the step log."""

import json
import os

import pytest

from conftest import servesim

SMALL = ["--num-prompts", "12"]


def test_same_seed_same_bytes_and_another_seed_another_workload():
    first, second = servesim(*SMALL, "--seed", "3"), servesim(*SMALL, "--seed", "3")
    assert first.returncode == 0 and first.stdout == second.stdout
    assert servesim(*SMALL, "--seed", "4").stdout != first.stdout


def test_json_has_the_design_contract_fields():
    result = servesim(*SMALL, "--format", "json", "--mode", "static,chunked")
    document = json.loads(result.stdout)
    assert {"num_gpu_blocks", "kv_cache_tokens", "model", "gpu"} <= set(document["config"])
    assert document["workload"]["num_prompts"] == 12
    assert [r["mode"] for r in document["results"]] == ["STATIC", "CONTINUOUS+CHUNKED"]
    contract = ("completed rejected duration total_input_tokens total_output_tokens "
                "request_throughput output_throughput total_token_throughput "
                "mean_ttft_ms median_ttft_ms p99_ttft_ms mean_tpot_ms median_tpot_ms p99_tpot_ms "
                "mean_itl_ms median_itl_ms p99_itl_ms mean_e2el_ms median_e2el_ms p99_e2el_ms "
                "num_preemptions num_steps kv_waste_pct peak_kv_usage_pct").split()
    for result_entry in document["results"]:
        assert set(contract) <= set(result_entry)


@pytest.mark.parametrize("args, says", [
    (["--block-size", "0"], "--block-size must be 1, 2, 4, 8 or a multiple of 16 in [16, 10,000,000] tokens"),
    (["--block-size", "x"], "invalid int value"),
    (["--mode", "turbo"], "unknown --mode"),
    (["--mode", "continuous", "--max-num-batched-tokens", "512"], "below --max-model-len"),
    (["--mode", "chunked", "--no-enable-chunked-prefill"], "contradicts --mode"),
    (["--gpu", "h100-sxm5"], "any one of these fits: --max-model-len "),
    (["--gpu", "l4"], "any one of these fits: --tensor-parallel-size 4,"),
    (["--num-gpu-blocks-override", "10"], "less than one --max-model-len"),
    (["--request-rate", "0"],
     "--request-rate must be a number in (0, 1,000,000,000] req/s, or inf, got 0.0"),
    (["--trace", "no-such-file.csv"], "cannot read trace"),
    (["--max-model-len", "100"], "no request completed: all 80 were rejected"),
    (["run", "--max-model-len", "100"], "no request completed"),
])
def test_bad_input_gets_one_line_and_exit_status_2(args, says):
    result = servesim(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def write_trace(path, rows):
    path.write_text("id,arrival_s,prompt_len,output_len\n"
                    + "".join(f"{r}\n" for r in rows), encoding="utf-8")


def test_step_log_has_one_line_per_step_with_the_scheduled_tokens_in_order(tmp_path):
    trace = tmp_path / "t.csv"
    write_trace(trace, ["a,0.0,700,2", "b,0.0,100,3"])
    log = tmp_path / "steps.jsonl"
    result = servesim("--trace", str(trace), "--mode", "chunked", "--step-log", str(log),
                      "--no-async-scheduling")  # test_async_scheduling.py: the same, async
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    # budget 512: a gets 512 of 700; next step a's last 188 with b's whole 100; then decodes.
    assert [line["scheduled"] for line in lines] == [
        {"a": 512}, {"a": 188, "b": 100}, {"a": 1, "b": 1}, {"b": 1}]
    assert [line["finished"] for line in lines] == [[], [], ["a"], ["b"]]
    assert lines[0]["time_s"] == 0.0
    assert abs(lines[1]["time_s"] - lines[0]["step_ms"] / 1000) < 1e-6
    assert lines[-1]["num_free_blocks"] == json.loads(servesim(
        "--trace", str(trace), "--mode", "chunked", "--format", "json").stdout)["config"][
        "num_gpu_blocks"]  # the pool this mode's budget leaves (gpu_memory.profile_num_tokens)


def test_a_bad_trace_line_leaves_no_step_log_behind(tmp_path):
    trace = tmp_path / "t.csv"
    write_trace(trace, ["a,0.0,100,2", "b,5.0,100,2", "c,4.0,100,2"])
    log = tmp_path / "steps.jsonl"
    result = servesim("--trace", str(trace), "--step-log", str(log))
    assert result.returncode == 2
    assert "t.csv:4: time goes backwards" in result.stderr
    assert os.listdir(tmp_path) == ["t.csv"]


@pytest.mark.parametrize("command", ["compare", "run", "sweep", "presets", "lesson-check",
                                     "calibration"])
def test_every_command_explains_itself(command):
    result = servesim(command, "--help")
    assert result.returncode == 0 and "%%" not in result.stdout


def test_a_long_runs_progress_line_is_rewritten_in_place_and_wiped_at_the_end():
    import io
    from commands.progress import CHECK_EVERY_STEPS, Progress

    class Recorder:
        num_steps, num_ended = CHECK_EVERY_STEPS, 40

    wall = iter([0.0, 5.0])  # started at 0 s; 5 s later at the first check: past SHOW_AFTER_S
    stream = io.StringIO()
    progress = Progress("CONTINUOUS", 80, stream=stream, wall_clock=lambda: next(wall),
                        command_started_s=0.0)
    progress(Recorder(), 12.5)
    assert stream.getvalue() == ("\rCONTINUOUS: 12.5 s simulated, 40/80 requests done, "
                                 f"{CHECK_EVERY_STEPS:,} steps\033[K")
    progress.clear()
    assert stream.getvalue().endswith("\r\033[K")


def test_no_progress_line_unless_stderr_is_a_terminal():
    result = servesim(*SMALL)  # stderr is a pipe here
    assert result.returncode == 0 and result.stderr == ""


def test_presets_names_the_source_of_every_preset():
    from presets import GPUS, MODELS
    text = servesim("presets").stdout
    sources = text.split("\nSources\n")[1]
    for key, preset in [*GPUS.items(), *MODELS.items()]:
        assert preset.source and f"\n{key}: " in "\n" + sources, key


def test_presets_says_which_gpus_have_no_measurement_behind_their_achievable_shares():
    from commands.show_presets import presets_tables
    from presets import GPUS
    lines = presets_tables()
    start = next(i for i, line in enumerate(lines) if line.startswith("What each GPU reaches"))
    rows = {line.split()[0]: line for line in lines[start + 2:start + 2 + len(GPUS)]}
    assert set(rows) == set(GPUS)
    for key, gpu in GPUS.items():
        assert ("NO: borrowed" in rows[key]) == (not gpu.achievable.measured), key
        assert not gpu.achievable.measured or "no measurement" not in gpu.achievable.source
        if not gpu.achievable.measured:
            assert gpu.achievable.source.startswith("no measurement: "), key
    assert not GPUS["mi325x"].achievable.measured and GPUS["mi300x"].achievable.measured


def test_async_scheduling_on_vllm_0_6_is_refused_in_one_line():
    result = servesim("run", "--vllm-version", "0.6", "--async-scheduling", "--num-prompts", "2")
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "--async-scheduling" in line and "0.18.0" in line and "no async scheduling" in line


def test_a_vllm_0_6_run_says_what_it_does_not_model():
    result = servesim("run", "--vllm-version", "0.6", "--dataset-name", "random",
                      "--random-input-len", "64", "--random-output-len", "4", "--num-prompts", "2")
    assert result.returncode == 0
    assert "engine: vLLM 0.6 (V0) CPU costs per step, sync scheduling" in result.stdout
    assert "not modelled: vLLM 0.6 (V0) schedules waiting prompts before running decodes" in (
        result.stdout)
    default = servesim("run", "--dataset-name", "random", "--random-input-len", "64",
                       "--random-output-len", "4", "--num-prompts", "2").stdout
    assert "engine: vLLM" not in default and "not modelled" not in default
