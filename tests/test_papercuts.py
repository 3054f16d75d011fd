"""What a new learner trips on first: flags never abbreviated, --no-enable-chunked-prefill on
run, takeaways that name the cause that held, the memory split in every header, and verdicts
said with how many draws of the workload they held in."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from commands.cli import OneLineParser, build_parser
from conftest import ROOT, servesim, servesim_here
from main import knobs
from reports.tables import chunked_itl_line


def one_line_error(*argv) -> str:
    """A usage error, in a process of its own (argparse exits)."""
    result = servesim(*argv)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr.strip()


@pytest.mark.parametrize("command", ["diagnose", "kv-waste", "lesson-check"])
def test_a_flag_a_command_lacks_is_refused_under_its_own_name(command):
    line = one_line_error(command, "--mode", "continuous")
    assert f"{command} has no --mode" in line and "--model" not in line


def test_no_parser_abbreviates_and_a_typo_gets_the_closest_flag():
    parser = build_parser(knobs())
    assert all(not sub.allow_abbrev and isinstance(sub, OneLineParser)
               for sub in [parser, *parser.commands.values()])
    line = one_line_error("run", "--max-num-seq", "4")
    assert "unrecognized argument --max-num-seq; the closest valid flag is --max-num-seqs" in line


def test_no_enable_chunked_prefill_on_run_picks_continuous(capsys):
    code, out, err = servesim_here(capsys, "run", "--no-enable-chunked-prefill",
                                   "--num-prompts", "10", "--format", "json")
    assert code == 0, err
    assert [r["mode"] for r in json.loads(out)["results"]] == ["CONTINUOUS"]
    line = one_line_error("run", "--mode", "chunked", "--no-enable-chunked-prefill")
    assert "contradicts --mode chunked" in line


def test_a_shipped_trace_runs_by_name_from_anywhere(tmp_path):
    result = servesim("run", "--trace", "azure-conv", "--num-prompts", "100", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trace azure-conv (azure): 100 requests" in result.stdout


def test_with_a_budget_above_every_prompt_no_takeaway_blames_short_prompts(tmp_path):
    """code/main.py's knob MAX_NUM_BATCHED_TOKENS = 8192, in a copy, as a learner edits it."""
    shutil.copytree(ROOT / "code", tmp_path / "code",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    main_py = tmp_path / "code" / "main.py"
    text, count = re.subn(r"^MAX_NUM_BATCHED_TOKENS = 512\b", "MAX_NUM_BATCHED_TOKENS = 8192",
                          main_py.read_text(encoding="utf-8"), flags=re.M)
    assert count == 1
    main_py.write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, str(main_py), "--mode", "continuous,chunked",
                             "--draws", "1"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    joined = result.stdout.replace("\n  ", " ")
    assert "long enough to stall" not in joined and "a chunk of at most" not in joined
    line = next(line for line in joined.splitlines() if line.startswith("- Chunked prefill"))
    assert "the 8,192-token budget holds the longest prompt" in line


def metrics(p99_itl_ms, sliced, longest, beside_pct=50.0, throughput=100.0) -> dict:
    return {"p99_itl_ms": p99_itl_ms, "num_sliced_prompts": sliced, "longest_prompt_len": longest,
            "decodes_beside_prompts_pct": beside_pct, "output_throughput": throughput}


@pytest.mark.parametrize("chunked, budget, says, never", [
    (metrics(90, 0, 4000), 8192, "nothing was sliced", "stalls"),
    (metrics(90, 7, 4000), 8192, "holds the longest prompt (4,000 tokens) whole", "stalls"),
    (metrics(50, 7, 4000), 512, "a whole long prompt (up to 4,000 tokens here) stalls", "holds"),
    (metrics(120, 7, 4000, beside_pct=80), 512, "80% of its decode tokens shared a step", "stalls"),
])
def test_the_chunked_itl_line_names_the_cause_its_counters_show(chunked, budget, says, never):
    line = chunked_itl_line(metrics(100, 0, 4000, beside_pct=10), chunked, budget)
    assert says in line and never not in line
    assert ("did not cut" in line) == (chunked["p99_itl_ms"] >= 100)


@pytest.mark.parametrize("command", ["run", "diagnose"])
def test_run_and_diagnose_print_the_memory_split(capsys, command):
    code, out, err = servesim_here(capsys, command, "--num-prompts", "10")
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("memory per GPU (GiB):"))
    split = re.search(r"\(GiB\): ([\d.,]+) usable at --gpu-memory-utilization [\d.]+ = ([\d.,]+) "
                      r"weights \+ ([\d.,]+) activation reserve \+ ([\d.,]+) KV cache", line)
    usable, weights, reserve, kv = (float(n.replace(",", "")) for n in split.groups())
    assert abs(usable - (weights + reserve + kv)) <= 0.2  # less than a block left, and rounding


def test_diagnose_prints_the_split_for_a_config_vllm_would_refuse(capsys):
    code, out, err = servesim_here(capsys, "diagnose", "--gpu", "h100-sxm5", "--num-prompts", "10")
    assert code == 0, err
    assert "memory per GPU (GiB):" in out and "hbm_bound" in out


def test_the_draws_line_counts_what_each_seeds_own_table_says(capsys):
    args = ["--mode", "continuous,chunked", "--num-prompts", "30"]
    code, out, err = servesim_here(capsys, *args, "--seed", "3", "--draws", "3")
    assert code == 0, err
    line = next(line for line in out.replace("\n  ", " ").splitlines()
                if line.startswith("- Over 3 draws"))
    led = 0
    for seed in (3, 4, 5):
        _, text, _ = servesim_here(capsys, *args, "--seed", str(seed), "--format", "json")
        whole, chunked = (r["request_goodput"] for r in json.loads(text)["results"])
        led += chunked > whole * 1.01
    assert f"(--seed 3 to 5), on goodput chunking led in {led}," in line
