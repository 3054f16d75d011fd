"""lesson-check: every verdict follows from the figures printed beside it."""

import re

import pytest

from commands.lesson_check import LessonCheck, in_band, report_lines
from main import simulate
from readme_blocks import all_blocks


@pytest.fixture(scope="module")
def checks():
    return LessonCheck(simulate).checks()


def numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", text)]


def test_kv_per_sequence_is_computed_from_the_model_and_is_off_by_the_printed_factor(checks):
    check = checks[0]
    assert "327,680 B/token" in check.findings[0] and "2.68 GB" in check.findings[0]
    assert check.verdict.startswith(f"off by {2.68 / 1.25:.1f}x")


def test_prefill_verdict_matches_the_printed_times(checks):
    check = checks[1]
    one_h100_ms = numbers(check.findings[0])[1]
    assert one_h100_ms > 800 * 1.1 and check.verdict.startswith("cannot hold on one H100")
    elsewhere_ms = numbers(check.findings[1])[-1]
    assert ("; holds on" in check.verdict) == in_band(elsewhere_ms / 1000, 0, 0.8)


def test_throughput_verdict_matches_the_simulated_figures(checks):
    check = checks[2]
    assert "would refuse to start" in check.findings[0]
    h100_tok_s = numbers(check.findings[1])[-1]
    assert h100_tok_s < 2200 and "cannot hold on one H100 (memory capacity)" in check.verdict
    last_tok_s = numbers(check.findings[-1])[-1]  # the H200, or where the claim holds
    assert ("; holds on" in check.verdict) == in_band(last_tok_s, 2200, 2400)
    if "; holds on" in check.verdict:
        assert check.verdict.endswith(check.findings[-1].split(":")[0])


def test_naive_loop_cannot_beat_its_printed_bandwidth_ceiling(checks):
    check = checks[4]
    naive_tok_s, _, ceiling_tok_s = numbers(check.findings[0])[-3:]
    assert naive_tok_s <= ceiling_tok_s < 600


def test_kv_waste_verdict_matches_the_printed_waste(checks):
    check = checks[5]
    paged_pct = numbers(check.findings[0].split("paged")[1])[0]
    assert check.verdict.startswith("holds") == (paged_pct < 4)


def test_itl_verdict_names_the_bandwidth_floor_it_prints(checks):
    check = checks[6]
    floor_ms = numbers(check.verdict.split("full bandwidth")[0])[-1]
    assert floor_ms > 15 and check.verdict.startswith("cannot hold on one H100 (bandwidth floor)")
    elsewhere_ms = numbers(check.findings[1].split(":")[1])[0]
    assert ("; holds on" in check.verdict) == (elsewhere_ms <= 15 * 1.1)


def test_where_no_gpu_count_meets_the_itl_claim_the_verdict_splits_the_chunk_step(checks):
    check = checks[6]
    if "not even on" not in check.verdict:  # the claim holds on some GPU count: it says which
        assert "; holds on" in check.verdict
        return
    step_ms, unsplit_ms = numbers(check.verdict.split("(fixed costs)")[1])[-2:]
    assert 0 < unsplit_ms < step_ms


def test_report_numbers_every_claim(checks):
    text = "\n".join(report_lines(checks))
    assert [line.split(".")[0] for line in text.splitlines() if re.match(r"\d\. claim", line)] == [
        str(n) for n in range(1, len(checks) + 1)]


def test_readme_shows_this_very_report(checks):
    # Computed once here for the checks above and for the docs' block (test_readme.py skips it).
    body = all_blocks()["lesson-check"]
    expected = "$ python3 code/main.py lesson-check\n" + "\n".join(report_lines(checks)) + "\n"
    assert body == expected, ("the block 'lesson-check' (code/commands/README.md) is stale: run "
                              "python3 tests/readme_blocks.py")


def test_the_v0_18_gotcha_runs_as_v0_18_would_and_the_verdict_names_where_it_held(checks):
    check = checks[8]
    served = check.findings[0]
    assert "chunked prefill on, draft model llama-3.2-1b" in served
    tpot_ms, plain_tpot_ms = numbers(served.split("mean TPOT")[1])[:2]
    acceptance_length = numbers(served.split("acceptance length")[1])[0]
    assert acceptance_length > 1 and tpot_ms < plain_tpot_ms  # it ran, and speculated
    assert ("servesim runs it" in check.verdict) == ("all 80 requests served" in served)
    assert check.verdict.startswith("does not hold in v0.18.0")
    assert "it held in V0 up to 0.6.3" in check.verdict
    assert "--speculative-config" in check.findings[2]


def test_ttft_tail_verdict_follows_the_short_and_long_tails_it_prints(checks):
    check = checks[7]
    assert check.claim.startswith("chunked prefill protects the TTFT tail")
    (mixed_short, mixed_chunked_short, *_), (behind_short, behind_chunked_short, *_) = (
        numbers(finding.split("short prompts")[-1]) for finding in check.findings[:2])
    capped_short, capped_long = numbers(check.findings[2].split("capped):")[1])
    chunking_hurt_both = mixed_chunked_short > mixed_short and behind_chunked_short > behind_short
    assert check.verdict.startswith("does not hold for chunking alone") == chunking_hurt_both
    assert ("What protects short requests' TTFT is capping" in check.verdict) == (
        capped_short < behind_short)
