"""sweep: rising load in each mode, the latency-throughput curve."""

import contextlib
import io
import json

import pytest

from commands.flags import parse_loads
from config import ConfigError
from conftest import servesim_here
from reports.sweep_table import SweepPoint, budget_rule_lines, sweep_table

FOUR_RATES = ["--num-prompts", "30", "--request-rates", "1,2,4,8"]


def servesim_json(capsys, *argv) -> dict:
    code, out, err = servesim_here(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def four_rates():
    """One sweep over four rates in three modes (well under a second), shared below."""
    import main
    from commands import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["sweep", *FOUR_RATES, "--format", "json"], main.simulate,
                        main.knobs()) == 0
    return json.loads(out.getvalue())


def curve(document: dict, mode: str) -> list[float]:
    return [r["output_throughput"] for r in document["results"] if r["mode"] == mode]


@pytest.mark.parametrize("mode", ["STATIC", "CONTINUOUS", "CONTINUOUS+CHUNKED"])
def test_throughput_rises_with_load_until_saturation_then_stays_flat(four_rates, mode):
    throughputs = curve(four_rates, mode)
    best = max(throughputs)
    knee = next(i for i, t in enumerate(throughputs) if t >= 0.95 * best)  # saturated from here
    assert all(later >= earlier for earlier, later in zip(throughputs[:knee + 1],
                                                          throughputs[1:knee + 1]))
    assert all(t >= 0.9 * best for t in throughputs[knee:])


def test_static_saturates_first_and_lowest(four_rates):
    static, chunked = curve(four_rates, "STATIC"), curve(four_rates, "CONTINUOUS+CHUNKED")
    assert max(static) < 0.5 * max(chunked)
    assert static[-1] < 1.25 * static[0] < chunked[-1]  # flat for STATIC, still room for chunked


def test_chunking_buys_tail_latency_at_the_highest_load(four_rates):
    at_top = {r["mode"]: r for r in four_rates["results"] if r["request_rate"] == 8}
    assert at_top["CONTINUOUS+CHUNKED"]["p99_itl_ms"] < at_top["CONTINUOUS"]["p99_itl_ms"] / 3


def test_json_has_one_result_per_mode_and_point_each_naming_its_load(four_rates):
    results = four_rates["results"]
    assert [(r["mode"], r["request_rate"]) for r in results] == [
        (mode, rate) for mode in ("STATIC", "CONTINUOUS", "CONTINUOUS+CHUNKED")
        for rate in (1, 2, 4, 8)]
    assert all(r["max_concurrency"] is None and "request_goodput" in r for r in results)
    assert four_rates["workload"]["request_rate"] is None  # varies: named per result
    assert four_rates["sweep"] == {"load": "request_rate",
                                   "goodput_slos_ms": {"ttft": 2000.0, "tpot": 100.0}}


def test_a_concurrency_sweep_names_max_concurrency(capsys):
    document = servesim_json(capsys, "sweep", "--num-prompts", "8", "--mode", "chunked",
                             "--concurrencies", "1,4", "--goodput", "e2el:60000")
    assert [(r["max_concurrency"], r["request_rate"]) for r in document["results"]] == [
        (1, "inf"), (4, "inf")]
    assert document["sweep"]["goodput_slos_ms"] == {"e2el": 60000.0}


@pytest.mark.parametrize("text, integer", [("1,x", False), ("4,2", False), ("1,1", False),
                                           ("0,1", False), ("1,inf", True), ("2.5", True)])
def test_bad_load_lists_are_refused(text, integer):
    with pytest.raises(ConfigError, match="e.g."):
        parse_loads("--loads", text, integer)


def test_load_lists_may_end_at_inf_for_rates():
    assert parse_loads("--request-rates", "0.5,1,inf", integer=False) == [0.5, 1.0, float("inf")]


def test_table_names_each_mode_once_and_reads_downwards():
    metrics = {"output_throughput": 100.0, "p99_ttft_ms": 2000.0, "p99_itl_ms": 30.0,
               "request_goodput": 0.5, "num_preemptions": 3}
    points = [SweepPoint(mode, "max_concurrency", n, metrics)
              for mode in ("STATIC", "CONTINUOUS") for n in (1, 8)]
    assert sweep_table(points) == [
        "mode        concurrency  out tok/s  P99 TTFT ms  P99 ITL ms  goodput req/s  preempted",
        "STATIC                1        100        2,000        30.0           0.50          3",
        "                      8        100        2,000        30.0           0.50          3",
        "CONTINUOUS            1        100        2,000        30.0           0.50          3",
        "                      8        100        2,000        30.0           0.50          3"]


def test_a_mode_saturates_only_where_its_throughput_stopped_growing(capsys):
    code, rising, _ = servesim_here(capsys, "sweep", "--mode", "continuous", "--request-rates", "1,2")
    assert code == 0 and "saturates at" not in rising
    assert "CONTINUOUS did not saturate within this sweep" in rising
    assert "--request-rates 1,2,4" in rising  # what to try next: twice the highest rate
    code, full, _ = servesim_here(capsys, "sweep", "--mode", "continuous")
    assert code == 0 and "CONTINUOUS saturates at about" in full


BUDGETS = ["--max-num-batched-tokens", "256,1024,4096", "--num-prompts", "30"]


def test_a_budget_sweep_serves_chunked_prefill_at_each_budget_and_names_it(capsys):
    document = servesim_json(capsys, "sweep", *BUDGETS)
    assert document["sweep"]["load"] == "max_num_batched_tokens"
    assert document["config"]["max_num_batched_tokens"] is None  # varies: named per result
    assert [(r["mode"], r["max_num_batched_tokens"]) for r in document["results"]] == [
        ("CONTINUOUS+CHUNKED", budget) for budget in (256, 1024, 4096)]
    assert [r["budget_blocks"] for r in document["results"]] == [16, 64, 256]
    for result in document["results"]:
        num_blocks = result["num_gpu_blocks"]  # each budget's own pool
        peak_blocks = round(result["peak_kv_usage_pct"] / 100 * num_blocks)
        assert result["min_free_blocks"] == num_blocks - peak_blocks
    itl = [r["p99_itl_ms"] for r in document["results"]]
    assert itl == sorted(itl)  # a larger budget, a longer step beside the decodes


def test_a_budget_sweep_table_labels_every_row_with_its_budget(capsys):
    code, out, _ = servesim_here(capsys, "sweep", *BUDGETS)
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("mode"))
    assert "budget tokens" in header and "preempted" in header and "fewest free" in header
    rows = lines[lines.index(header) + 1:lines.index(header) + 4]
    assert rows[0].split()[:2] == ["CONTINUOUS+CHUNKED", "256"]
    assert [row.split()[0] for row in rows[1:]] == ["1024", "4096"]


@pytest.mark.parametrize("argv, message", [
    (["--mode", "continuous"], "--max-num-batched-tokens"),
    (["--request-rates", "1,2"], "sweep one thing at a time"),
    (["--max-num-batched-tokens", "512,256"], "must rise"),
])
def test_budget_sweeps_that_cannot_run_are_refused_in_one_line(capsys, argv, message):
    code, out, err = servesim_here(capsys, "sweep", *BUDGETS, *argv)
    assert code == 2 and message in err and out == ""


def budget_points(rows, fewest_free):
    """(budget, out tok/s, P99 ITL ms) rows as SweepPoints of one mode, 16-token blocks."""
    return [SweepPoint("CONTINUOUS+CHUNKED", "max_num_batched_tokens", budget,
                       {"output_throughput": tok_s, "p99_itl_ms": itl_ms,
                        "budget_blocks": budget // 16, "min_free_blocks": free,
                        "num_gpu_blocks": 1000,
                        "num_preemptions": 0, "request_goodput": goodput})
            for (budget, tok_s, itl_ms, goodput), free in zip(rows, fewest_free)]


def test_the_budget_rule_finds_the_knee_and_says_whether_the_pool_or_the_budget_limits():
    rows = [(256, 100.0, 50.0, 0.5), (512, 120.0, 90.0, 0.9), (1024, 124.0, 170.0, 0.4),
            (2048, 125.0, 320.0, 0.3)]
    roomy = budget_rule_lines(budget_points(rows, [900, 800, 700, 600]), 16)
    assert "the budget, not the KV cache, limits a step" in roomy[0].replace("\n  ", " ")
    knee = roomy[1].replace("\n  ", " ")
    assert "past a 512-token budget each larger one adds under 5%" in knee
    assert "(120 -> 125 tok/s by 2,048 tokens)" in knee and "from 90 to 320 ms" in knee
    assert "a 512-token budget (0.90 req/s)" in roomy[2]
    full = budget_rule_lines(budget_points(rows, [0, 0, 0, 0]), 16)
    assert "fill the KV cache at every budget" in full[0].replace("\n  ", " ")
    partly = budget_rule_lines(budget_points(rows, [900, 800, 50, 40]), 16)
    assert "from a 1,024-token budget on" in partly[0].replace("\n  ", " ")
