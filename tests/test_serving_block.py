"""`run`: vllm bench serve's "Serving Benchmark Result" block, line for line, then servesim's."""

import json

import pytest

from conftest import servesim_here as servesim
from metrics import peak_concurrent_requests, percentile_name
from request import Request
from batch import EngineStep, SchedulerOutput, StepResult
from reports.timeseries import OutputTokensPerSecond

SMALL = ["--num-prompts", "20"]

# The block as `vllm bench serve` prints it for a generative model with a tokenizer, transcribed
# from `benchmark()` in vllm/benchmarks/serve.py (vllm-project/vllm, commit 009e6d4a1cd6), with
# --goodput and --percentile-metrics ttft,tpot,itl,e2el. Conditional lines are marked.
VLLM_LABELS = [
    "============ Serving Benchmark Result ============",
    "Successful requests:",
    "Failed requests:",
    "Maximum request concurrency:",       # only with --max-concurrency
    "Request rate configured (RPS):",     # only when the rate is finite
    "Benchmark duration (s):",
    "Total input tokens:",
    "Total generated tokens:",
    "Request throughput (req/s):",
    "Request goodput (req/s):",           # only with --goodput
    "Output token throughput (tok/s):",
    "Peak output token throughput (tok/s):",
    "Peak concurrent requests:",
    "Total token throughput (tok/s):",
    "---------------Time to First Token----------------",
    "Mean TTFT (ms):",
    "Median TTFT (ms):",
    "P99 TTFT (ms):",
    "-----Time per Output Token (excl. 1st token)------",
    "Mean TPOT (ms):",
    "Median TPOT (ms):",
    "P99 TPOT (ms):",
    "---------------Inter-token Latency----------------",
    "Mean ITL (ms):",
    "Median ITL (ms):",
    "P99 ITL (ms):",
    "----------------End-to-end Latency----------------",
    "Mean E2EL (ms):",
    "Median E2EL (ms):",
    "P99 E2EL (ms):",
]
SERVESIM_SECTION = "---------------Scheduler (servesim)---------------"


def block_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(VLLM_LABELS[0])
    end = lines.index("=" * 50, start)
    return lines[start:end + 1]


def label(line: str) -> str:
    """A rule is its own label; a value line's label is its first 40 characters."""
    return line if line.startswith(("=", "-")) else line[:40].rstrip()


def vllm_part(lines: list[str]) -> list[str]:
    return [label(line) for line in lines[:lines.index(SERVESIM_SECTION)]]


def test_run_block_has_vllms_labels_in_vllms_order(capsys):
    code, out, _ = servesim(capsys, "run", *SMALL, "--goodput", "ttft:2000")
    assert code == 0
    expected = [x for x in VLLM_LABELS if x != "Maximum request concurrency:"]
    assert vllm_part(block_lines(out)) == expected


def test_conditional_lines_follow_vllms_conditions(capsys):
    _, out, _ = servesim(capsys, "run", *SMALL, "--request-rate", "inf", "--max-concurrency", "4")
    labels = vllm_part(block_lines(out))
    expected = [x for x in VLLM_LABELS if x not in ("Request rate configured (RPS):",
                                                    "Request goodput (req/s):")]
    assert labels == expected


def test_value_lines_use_vllms_widths_and_two_decimal_floats(capsys):
    _, out, _ = servesim(capsys, "run", *SMALL)
    for line in block_lines(out):
        if line.startswith(("=", "-")):
            assert len(line) == 50
            continue
        assert line[40] == " " and len(line) == 51, line  # "{:<40} {:<10}"
        value = line[41:].strip()
        assert value.isdigit() or len(value.split(".")[1]) == 2, line


def test_block_values_are_the_runs_own_metrics(capsys):
    _, out, _ = servesim(capsys, "run", *SMALL, "--mode", "continuous")
    _, json_out, _ = servesim(capsys, "run", *SMALL, "--mode", "continuous", "--format", "json")
    metrics = json.loads(json_out)["results"][0]
    values = {label(line): line[41:].strip() for line in block_lines(out)}
    assert values["Successful requests:"] == str(metrics["completed"])
    assert values["Benchmark duration (s):"] == f"{metrics['duration']:.2f}"
    assert values["P99 ITL (ms):"] == f"{metrics['p99_itl_ms']:.2f}"
    assert values["Engine steps:"] == str(metrics["num_steps"])
    assert values["Peak concurrent requests:"] == f"{metrics['max_concurrent_requests']:.2f}"


def test_metric_percentiles_add_one_line_per_percentile_and_json_keys(capsys):
    _, out, _ = servesim(capsys, "run", *SMALL, "--metric-percentiles", "50,99.9",
                         "--percentile-metrics", "itl,ttft")
    labels = vllm_part(block_lines(out))
    assert labels[labels.index("Mean TTFT (ms):"):] == [
        "Mean TTFT (ms):", "Median TTFT (ms):", "P50 TTFT (ms):", "P99.9 TTFT (ms):",
        "---------------Inter-token Latency----------------",  # vLLM's order, not the flag's
        "Mean ITL (ms):", "Median ITL (ms):", "P50 ITL (ms):", "P99.9 ITL (ms):"]
    _, json_out, _ = servesim(capsys, "run", *SMALL, "--metric-percentiles", "50,99.9",
                              "--format", "json")
    result = json.loads(json_out)["results"][0]
    assert result["p50_itl_ms"] == pytest.approx(result["median_itl_ms"])
    assert "p99.9_e2el_ms" in result and "request_goodput" not in result


def test_goodput_appears_in_json_only_when_asked(capsys):
    _, json_out, _ = servesim(capsys, "run", *SMALL, "--goodput", "ttft:0", "--format", "json")
    result = json.loads(json_out)["results"][0]
    assert result["request_goodput"] == 0.0  # nobody gets a first token in zero time


def test_percentile_names_follow_vllm():
    assert [percentile_name(p) for p in (99.0, 50, 99.9)] == ["99", "50", "99.9"]


def finished(arrival_s, last_token_s):
    request = Request("r", arrival_s, 1, 1)
    request.first_token_s = request.last_token_s = last_token_s
    return request


def test_peak_concurrency_counts_half_open_intervals():
    # [0, 2) and [2, 3) never overlap; [1, 2.5) overlaps both
    assert peak_concurrent_requests([finished(0, 2), finished(2, 3)]) == 1
    assert peak_concurrent_requests([finished(0, 2), finished(2, 3), finished(1, 2.5)]) == 2


def test_peak_output_tokens_counts_whole_seconds_from_the_first_arrival():
    tokens_per_s = OutputTokensPerSecond()
    first = SchedulerOutput()
    first.add(Request("r", 0.25, 1, 1), 1, 0)  # the first step admits the first arrival
    start_s = 0.25
    for end_s, num_tokens in [(0.5, 3), (0.9, 4), (1.2, 1), (1.99, 6), (2.0, 9)]:
        result = StepResult(num_bulk_sampled=num_tokens)
        tokens_per_s(EngineStep(0, start_s, end_s - start_s, first, result, 0, 0, None, 0, 0))
        start_s = end_s
    # seconds [0.25, 1.25): 3 + 4 + 1 = 8; [1.25, 2.25): 6 + 9 = 15
    assert tokens_per_s.peak(start_s=0.25) == 15.0
