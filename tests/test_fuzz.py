"""Random valid configurations and workloads, in every mode: the invariants hold, every run ends
in a result or a clean refusal, JSON is strict, and the same seed gives the same bytes.

    python3 -m pytest tests/test_fuzz.py                          # a few seconds (CI)
    SERVESIM_FUZZ_CASES=2000 python3 -m pytest tests/test_fuzz.py # the long form

Three fuzzers, each seeded (`random.Random(case)`), so a failure names the case that shows it:

- the engine: a random config (drawn, then kept only if `validate` and the mode's checks pass)
  and random request rows, served in every mode twice, the decodes counted in bulk and by the
  plain rules, each run watched by an InvariantChecker; the two must agree on every token time;
- the command line: random flags, in range and a little out of it, through cli.main; the run
  prints a result (exit 0) or one `servesim: error:` line (exit 2), its JSON parses strictly, and
  a second run of the same argv prints the same bytes;
- every number flag of every serving command, given values a script might pass by mistake (nan,
  inf, 0, -1, 1e308, 10^30): exit 0 or a clean refusal, never a traceback or a hang. The flags
  are read from the parser, so a flag added later is fuzzed too.

A new knob joins `draw_config` (and, if it has a flag, `draw_flags`).
"""

import json
import math
import os
import random

import pytest

from commands.invariants import InvariantChecker
from config import ConfigError, EngineConfig
from conftest import make_workload, servesim_here
from test_bad_input import refusal
from forward_model import make_clock
from main import simulate
from modes import MODES

NUM_CASES = int(os.environ.get("SERVESIM_FUZZ_CASES", "0"))  # 0: the quick form below
ENGINE_CASES = NUM_CASES or 30
COMMAND_CASES = NUM_CASES or 24
GARBAGE = ["nan", "inf", "-inf", "0", "-1", "1e308", "1" + "0" * 30]


def strict_json(text: str):
    """json.loads, refusing NaN and Infinity, which are not JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


# -- the engine ----------------------------------------------------------------------------------

def draw_config(rng: random.Random) -> EngineConfig:
    max_model_len = rng.choice([32, 100, 256, 512])
    return EngineConfig(
        block_size=rng.choice([16, 16, 32]), max_model_len=max_model_len,
        max_num_seqs=rng.choice([1, 2, 8, 64]),
        max_num_batched_tokens=rng.choice([None, None, max_model_len, 3 * max_model_len]),
        default_chunked_budget=rng.choice([64, 128, 512]),
        long_prefill_token_threshold=rng.choice([0, 0, 1, 24, max_model_len]),
        batching_window_ms=rng.choice([0.0, 10.0, 250.0]),
        forward_model=rng.choice(["roofline", "linear"]),
        linear_step_ms=rng.choice([0.0, 0.2]), linear_prefill_token_ms=rng.choice([0.01, 0.04]),
        model=rng.choice(["llama-3.3-70b-fp8", "llama-3.1-8b", "qwen2.5-7b"]),
        tensor_parallel_size=rng.choice([1, 2, 4]))


def draw_rows(rng: random.Random, max_model_len: int) -> list:
    rows, arrival_s = [], 0.0
    for _ in range(rng.randint(1, 24)):
        arrival_s += rng.choice([0.0, 0.0, rng.expovariate(rng.choice([1.0, 50.0]))])
        rows.append((arrival_s, rng.randint(1, max_model_len + 4), rng.randint(1, max_model_len)))
    return rows


def accepted(config: EngineConfig, mode) -> bool:
    try:
        config.validate()
        mode.check(config)
    except ConfigError:
        return False
    return True


def serve_checked(config, num_blocks, rows, max_concurrency, mode, every_request):
    workload = make_workload(rows, max_concurrency)
    checker = InvariantChecker(mode, config, every_request=every_request)
    recorder = simulate(workload, checker, config, num_blocks, make_clock(config), [checker])
    checker.check_end(recorder, workload)
    return [recorder.record(i) for i in range(len(recorder.status))], recorder.summary()


def test_random_engines_keep_every_invariant_and_bulk_agrees_with_the_rules():
    num_served = num_preempting = 0
    for case in range(ENGINE_CASES):
        rng = random.Random(case)
        config = draw_config(rng)
        blocks_per_sequence = -(-config.max_model_len // config.block_size)
        num_blocks = blocks_per_sequence * rng.choice([1, 2, 5, 12])
        rows = draw_rows(rng, config.max_model_len)
        max_concurrency = rng.choice([None, None, 1, 4])
        for name, mode in MODES.items():
            if not accepted(config, mode):
                continue
            bulk = serve_checked(config, num_blocks, rows, max_concurrency, mode, False)
            rules = serve_checked(config, num_blocks, rows, max_concurrency, mode, True)
            assert bulk == rules, f"case {case}, mode {name}"
            num_served += 1
            num_preempting += bulk[1]["num_preemptions"] > 0
    assert num_served >= 2 * ENGINE_CASES  # most draws are valid: the fuzz really served
    assert num_preempting >= ENGINE_CASES // 10  # and pools were small enough to preempt


# -- the command line ----------------------------------------------------------------------------

FITTING = [("llama-3.3-70b-fp8", "h200", 1), ("llama-3.1-8b", "h100-sxm5", 1),
           ("llama-3.3-70b", "h100-sxm5", 2), ("qwen2.5-7b", "a100-80gb", 1),
           ("mistral-7b", "l4", 1), ("llama-3.3-70b-fp8", "h100-sxm5", 1)]


def draw_flags(rng: random.Random) -> list[str]:
    """A command and its flags: mostly valid, sometimes a value just out of range."""
    command = rng.choice(["compare", "run", "run", "sweep"])
    model, gpu, tp = rng.choice(FITTING)
    argv = [command, "--model", model, "--gpu", gpu, "--tensor-parallel-size", str(tp),
            "--num-prompts", str(rng.randint(1, 12)), "--seed", str(rng.randint(-5, 10**9))]
    optional = {
        "--max-model-len": lambda: rng.choice(["2048", "4096", "8192", "100"]),
        "--max-num-seqs": lambda: rng.choice(["1", "4", "64", "256", "2048"]),
        "--max-num-batched-tokens": lambda: rng.choice(["64", "512", "8192", "16384"]),
        "--block-size": lambda: rng.choice(["16", "32", "128", "8"]),
        "--num-gpu-blocks-override": lambda: rng.choice(["512", "600", "4096", "10"]),
        "--long-prefill-token-threshold": lambda: rng.choice(["0", "64", "9000"]),
        "--kv-cache-dtype": lambda: "fp8",
        "--gpu-memory-utilization": lambda: rng.choice(["0.5", "0.95", "1.0"]),
        "--batching-window-ms": lambda: rng.choice(["0", "5", "1000"]),
        "--request-rate": lambda: rng.choice(["0.5", "10", "inf", "1e-9"]),
        "--burstiness": lambda: rng.choice(["0.1", "1", "50"]),
        "--max-concurrency": lambda: rng.choice(["1", "3", "100"]),
        "--dataset-name": lambda: rng.choice(["random", "normal", "mixed"]),
        "--forward-model": lambda: "linear",
        "--goodput": lambda: rng.choice(["ttft:500", "tpot:30", "e2el:0"]),
    }
    for flag in rng.sample(sorted(optional), rng.randint(0, 6)):
        argv += [flag, optional[flag]()]
    if command == "sweep":
        argv += rng.choice([["--request-rates", "1,4"], ["--concurrencies", "1,4"]])
        argv += ["--mode", rng.choice(["static", "chunked", "continuous,chunked"])]
    elif command == "run":
        argv += ["--mode", rng.choice(list(MODES))]
    return argv + ["--format", rng.choice(["json", "table"])]


def clean_outcome(capsys, argv) -> tuple[int, str]:
    """Run argv; it must print a result or one refusal line. Returns (status, stdout)."""
    code, out, err = refusal(capsys, argv)
    if code == 0:
        assert out and err == "", (argv, err)
        if "json" in argv:
            strict_json(out)
    else:
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (argv, code, err)
        assert lines[0].startswith("servesim: error: "), (argv, err)
    return code, out


def test_random_command_lines_print_a_result_or_one_refusal_and_repeat_byte_for_byte(capsys):
    outcomes = []
    for case in range(COMMAND_CASES):
        argv = draw_flags(random.Random(case))
        code, out = clean_outcome(capsys, argv)
        if case % 3 == 0:
            assert clean_outcome(capsys, argv) == (code, out), f"case {case}: {argv}"
        outcomes.append(code)
    assert outcomes.count(0) >= COMMAND_CASES // 4  # the fuzz reaches real runs, not only refusals


# -- every number flag, given what a script might pass by mistake ---------------------------------

def number_flags(command: str) -> list[str]:
    """The options of `command` whose values are parsed as numbers, from the parser itself."""
    import argparse

    from commands.cli import build_parser
    from config import Knobs
    parser = build_parser(Knobs())
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.option_strings[0] for action in subparsers.choices[command]._actions
                  if action.type in (int, float) and action.option_strings)


@pytest.mark.parametrize("command", ["compare", "run", "sweep"])
def test_every_number_flag_takes_garbage_cleanly(capsys, command):
    flags = number_flags(command)
    assert "--max-num-seqs" in flags and "--request-rate" in flags
    rng = random.Random(command)
    base = [command, "--num-prompts", "3"]
    if command == "sweep":
        base += ["--request-rates", "2"]
    values = GARBAGE if NUM_CASES else rng.sample(GARBAGE, 3)
    for flag in flags:
        for value in values:
            clean_outcome(capsys, [*base, flag, value, "--format", "json"])


@pytest.mark.parametrize("argv", [
    ["compare", "--num-prompts", "10"], ["run", "--num-prompts", "10", "--mode", "static"],
    ["sweep", "--num-prompts", "8", "--request-rates", "1,2", "--format", "json"],
    ["sweep", "--trace", "{trace}", "--concurrencies", "1,4", "--mode", "chunked"],
    ["run", "--trace", "{trace}", "--step-log", "{steps}", "--mode", "continuous"],
    ["presets"], ["lesson-check"], ["calibration", "--group", "kv", "--format", "json"],
], ids=lambda argv: argv[0] + ("-trace" if "--trace" in argv else ""))
def test_same_seed_same_bytes_for_every_command(capsys, tmp_path, argv):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n" + "".join(
        f"{0.05 * i},{100 + 97 * i % 900},{1 + 31 * i % 60}\n" for i in range(12)))
    argv = [a.format(trace=trace, steps=tmp_path / "steps.jsonl") for a in argv]
    first = servesim_here(capsys, *argv)
    steps = (tmp_path / "steps.jsonl").read_bytes() if "--step-log" in argv else None
    assert first[0] == 0, first[2]
    assert servesim_here(capsys, *argv) == first
    if steps is not None:
        assert (tmp_path / "steps.jsonl").read_bytes() == steps
    assert first[0] == 0, first[2]
    assert servesim_here(capsys, *argv) == first
    if "json" in argv:
        strict_json(first[1])


def test_a_huge_normal_spread_is_clipped_not_overflowed():
    from workload import normal_workload
    workload = normal_workload(input_mean=100, input_std=1e7, output_std=1e7, num_prompts=50,
                               max_model_len=4096)
    lengths = [(r.prompt_len, r.max_tokens) for r in workload.make_requests()]
    assert all(1 <= p <= 4096 and 1 <= o <= 4096 for p, o in lengths)
    assert math.isfinite(workload.planned_span_s())
