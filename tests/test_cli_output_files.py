"""The new flags from the outside: one-line errors, files written whole or not at all."""

import json
import os
import xml.etree.ElementTree as ElementTree

import pytest

from conftest import servesim_here as servesim
from reports.timeline import LEGEND

SMALL = ["--num-prompts", "12"]


@pytest.mark.parametrize("argv, named", [
    (["run", "--goodput", "ttft=500"], "--goodput"),
    (["compare", "--goodput", "itl:50"], "--goodput"),
    (["run", "--mode", "static,chunked"], "run takes one --mode"),
    (["run", "--metric-percentiles", "99,abc"], "--metric-percentiles"),
    (["run", "--percentile-metrics", "ttft,speed"], "--percentile-metrics"),
    (["run", "--timeline-at", "middle"], "--timeline-at"),
    (["compare", "--timeline", "--format", "json"], "--timeline"),
    (["sweep", "--request-rates", "1,two"], "--request-rates"),
    (["sweep", "--request-rate", "2"], "--request-rate conflicts"),
    (["sweep", "--concurrencies", "1,8", "--request-rates", "1"], "not both"),
    (["sweep", "--concurrencies", "0"], "--concurrencies"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_on_stdout(capsys, argv, named):
    code, out, err = servesim(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("servesim: error: ") and named in err


@pytest.mark.parametrize("flag", ["--svg", "--save-detailed", "--step-log"])
def test_an_output_path_in_a_missing_directory_is_refused_before_running(capsys, tmp_path,
                                                                        flag):
    path = tmp_path / "missing" / "out.file"
    code, out, err = servesim(capsys, "run", *SMALL, flag, str(path))
    assert code == 2 and out == "" and f"{flag} {path}: directory" in err
    assert not (tmp_path / "missing").exists()


def test_a_run_that_fails_after_simulating_leaves_no_file_behind(capsys, tmp_path):
    code, _, err = servesim(capsys, "run", *SMALL, "--svg", str(tmp_path / "chart.svg"),
                            "--step-log", str(tmp_path / "steps.jsonl"),
                            "--timeline-at", "request:999")
    assert code == 2 and "request:999" in err
    assert os.listdir(tmp_path) == []  # no chart, no step log, no .partial


def test_svg_and_detailed_files_appear_whole_on_success(capsys, tmp_path):
    svg, detailed = tmp_path / "run.svg", tmp_path / "run.json"
    code, out, _ = servesim(capsys, "run", *SMALL, "--svg", str(svg), "--save-detailed",
                            str(detailed))
    assert code == 0 and "Serving Benchmark Result" in out
    ElementTree.parse(svg)
    result = json.loads(detailed.read_text())["results"][0]
    assert len(result["input_lens"]) == len(result["ttfts"]) == 12
    assert [len(itls) for itls in result["itls"]] == [n - 1 for n in result["output_lens"]]
    itls = result["itls"][0]
    assert sum(itls) == pytest.approx(result["latencies"][0] - result["ttfts"][0])
    assert sorted(os.listdir(tmp_path)) == ["run.json", "run.svg"]


def test_compare_without_new_flags_judges_goodput_by_the_chat_slos_and_draws_no_timeline(capsys):
    _, out, _ = servesim(capsys, "compare", *SMALL)
    lines = out.splitlines()
    slo = next(i for i, line in enumerate(lines) if line.startswith("goodput: "))
    assert lines[slo] == ("goodput: requests with TTFT <= 2000 ms and TPOT <= 100 ms, per second "
                          "(the default: an interactive chat)")
    assert lines[slo + 2].endswith("goodput req/s") and LEGEND[0] not in out


def test_compare_with_goodput_adds_a_column_and_json_key(capsys):
    _, out, _ = servesim(capsys, "compare", *SMALL, "--goodput", "ttft:1000")
    lines = out.splitlines()
    slo = next(i for i, line in enumerate(lines) if line.startswith("goodput: "))
    assert lines[slo] == "goodput: requests with TTFT <= 1000 ms, per second"
    assert lines[slo + 2].endswith("goodput req/s")
    _, json_out, _ = servesim(capsys, "compare", *SMALL, "--goodput", "ttft:1000", "--format",
                              "json")
    assert all("request_goodput" in result for result in json.loads(json_out)["results"])


def test_compare_draws_a_timeline_per_mode_and_the_legend_once(capsys):
    _, out, _ = servesim(capsys, "compare", *SMALL, "--mode", "continuous,chunked",
                         "--timeline", "3")
    assert "CONTINUOUS: steps 0-2 of" in out and "CONTINUOUS+CHUNKED: steps 0-2 of" in out
    assert out.count(LEGEND[0]) == 1
