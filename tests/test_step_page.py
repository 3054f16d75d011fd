"""`run --html` and `run --explain`: every decision with its rule, in a browser and in the terminal.

The page is opened in a real browser (headless Chromium): its script replays the steps, and
what the DOM shows at every step must be what the scheduler did (the step log, and the running
and waiting queues read from the scheduler itself). Without Chromium these tests skip, saying
why; with CI=true they must run (.ci/run installs Debian's chromium package).
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import servesim_here
from reports import step_page
from reports.reasons import RULES
from reports.step_record import StepRecorder

SPECULATION = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
               '"num_speculative_tokens": 3}')
TWELVE = ["--mode", "chunked", "--num-prompts", "12"]
# A small pool, a shared prefix and EAGLE drafts: preemptions, prefix hits and verified drafts
MIXED = ["--mode", "chunked", "--model", "llama-3.1-8b", "--gpu", "h100-sxm5", "--num-prompts",
         "16", "--dataset-name", "random", "--random-input-len", "150", "--random-prefix-len", "64",
         "--random-output-len", "300", "--max-model-len", "1024", "--num-gpu-blocks-override", "64",
         "--speculative-config", SPECULATION]
# Whole prompts (no chunked prefill), two seats, a small pool, everybody at once
WHOLE = ["--mode", "continuous", "--num-prompts", "6", "--max-model-len", "2000",
         "--num-gpu-blocks-override", "130", "--max-num-seqs", "2", "--request-rate", "inf"]


def make_page(tmp_path: Path, argv: list[str], name="run"):
    """Write the page (and the step log) in this process; return (page, step log lines, the
    StepRecorder, which kept the scheduler's own queues: --explain asks it to)."""
    import main
    from commands import cli
    recorders = []
    original = StepRecorder.make_scheduler

    def keep(self, *args, **kwargs):
        recorders.append(self)
        return original(self, *args, **kwargs)

    page, log = tmp_path / f"{name}.html", tmp_path / f"{name}.jsonl"
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.setattr(StepRecorder, "make_scheduler", keep)
        code = cli.main(["run", *argv, "--html", str(page), "--step-log", str(log),
                         "--explain", "0"], main.simulate, main.knobs())
    assert code == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return page, lines, recorders[0]


def servesim_quiet(argv: list[str]) -> tuple[int, str]:
    import main
    from commands import cli
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = cli.main(argv, main.simulate, main.knobs())
    return code, out.getvalue()


@pytest.fixture(scope="module")
def twelve(tmp_path_factory):
    """The page of `run --mode chunked --num-prompts 12`, made once for the tests below."""
    return make_page(tmp_path_factory.mktemp("twelve"), TWELVE)


def page_data(page: Path) -> dict:
    text = page.read_text()
    return json.loads(re.search(r"const DATA = (\{.*?\});\n", text, re.S).group(1))


def expected_reasons(record) -> dict:
    """request id -> its sentences in the step (decision first), as the terminal says them."""
    reasons = {}
    for reason in step_page.decisions_in_order(record, record.running_before):
        reasons[reason.request_id] = [reason.sentence]
    for event in record.events:
        reasons.setdefault(event.request_id, []).append(event.sentence)
    return reasons


# -- the reasons' numbers are the scheduler's (no browser needed) ----------------------------------

@pytest.mark.parametrize("argv", [MIXED, WHOLE], ids=["preempt+prefix+spec", "whole prompts"])
def test_every_decision_names_the_schedulers_numbers(tmp_path, argv):
    _, log, recorder = make_page(tmp_path, argv)
    block_size = recorder.scheduler.kv_cache.block_size
    budget, slots = recorder.scheduler.max_num_batched_tokens, 0
    seen = {rule: 0 for rule in RULES}
    assert len(recorder.records) == len(log)
    for record, line in zip(recorder.records, log):
        decisions = {reason.request_id: reason for reason in record.decisions}
        assert len(decisions) == len(record.decisions), "one decision a request"
        # every request the step found running or admitted has exactly one decision
        assert set(record.running_before) | set(record.admitted) <= set(decisions)
        left = budget
        for request_id, tokens in line["scheduled"].items():
            reason = decisions[request_id]
            numbers = reason.numbers
            assert numbers.get("tokens", 1) == tokens, reason.sentence
            if "budget" in numbers and reason.rule != "wait_budget":
                assert numbers["budget"] == left, reason.sentence
            left -= tokens + slots
        preempted = [rid for rid, r in decisions.items() if r.rule.startswith("preempted")]
        assert sorted(preempted) == sorted(line["preempted"])
        for reason in record.decisions:
            seen[reason.rule] += 1
            if reason.rule in ("wait_blocks", "wait_blocks_cached", "wait_lookahead",
                               "preempted", "preempted_self"):
                assert reason.numbers["needed"] > reason.numbers["free"], reason.sentence
            if reason.rule == "wait_max_num_seqs":
                assert reason.numbers["running"] == recorder.scheduler.max_num_seqs
        for event in record.events:
            seen[event.rule] += 1
            rid, numbers = event.request_id, event.numbers
            if event.rule == "hit":
                assert numbers["tokens"] == line["cached_tokens"][rid] == numbers["hit"] * block_size
            if event.rule == "miss":
                assert line["cached_tokens"][rid] == 0
            if event.rule == "verified":
                assert [numbers["drafts"], numbers["accepted"]] == line["drafts"][rid]
        finished = [e.request_id for e in record.events if e.rule.startswith("finished")]
        assert finished == line["finished"]
    plain = tmp_path / "plain.jsonl"  # the page's plain rules decide what the bulk path does
    code, _ = servesim_quiet(["run", *argv, "--step-log", str(plain)])
    assert code == 0 and [json.loads(line) for line in plain.read_text().splitlines()] == log
    if argv is MIXED:
        assert seen["preempted"] and seen["hit"] and seen["verified"] and seen["decode_drafts"]
    else:
        assert seen["wait_max_num_seqs"] and seen["wait_blocks"] and seen["wait_blocks_cached"]
        assert seen["wait_whole_prompt"] and seen["wait_preemption"]


def test_explain_prints_the_same_sentences_as_the_record(capsys, twelve):
    _, _, recorder = twelve
    code, out, err = servesim_here(capsys, "run", *TWELVE, "--explain", "4")
    assert code == 0, err
    printed = out[out.index("Every decision in step 4"):].splitlines()[2:]
    expected = {rid: sentences for rid, sentences in expected_reasons(recorder.records[4]).items()}
    got = {}
    for line in printed:
        match = re.match(r"  request (\S+): (.*)  \[(.*)\]$", line)
        assert match, line
        got.setdefault(match.group(1), []).append(match.group(2))
    assert got == expected and len(got) >= 2


def test_the_default_workload_page_is_under_a_megabyte(capsys, tmp_path):
    page = tmp_path / "default.html"
    code, _, err = servesim_here(capsys, "run", "--mode", "chunked", "--html", str(page))
    assert code == 0, err
    text = page.read_text()
    assert len(text.encode()) < 1_000_000
    # self-contained: nothing for the browser to fetch
    assert not re.search(r"<link|<img|\bsrc=|@import|url\(|@font-face", text)


def test_a_ten_thousand_step_run_is_held_or_refused_in_one_line(capsys, monkeypatch, tmp_path):
    argv = ["--mode", "chunked", "--dataset-name", "random", "--random-input-len", "100",
            "--random-output-len", "10000", "--num-prompts", "1", "--max-model-len", "10200",
            "--forward-model", "linear"]
    page = tmp_path / "long.html"
    code, _, err = servesim_here(capsys, "run", *argv, "--html", str(page))
    assert code == 0, err
    data = page_data(page)
    assert data["num_steps"] == len(data["steps"]) == 10_000
    assert page.stat().st_size < step_page.PAGE_LIMIT_BYTES
    # a page that cannot hold the run refuses it, pointing to a window, and writes nothing
    monkeypatch.setattr(step_page, "PAGE_LIMIT_BYTES", 100_000)
    code, out, err = servesim_here(capsys, "run", *argv, "--html", str(tmp_path / "no.html"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--html-steps" in err
    assert not list(tmp_path.glob("no.html*"))
    shorter = [arg if arg != "10000" else "2000" for arg in argv]
    code, _, err = servesim_here(capsys, "run", *shorter, "--html", str(tmp_path / "window.html"),
                                 "--html-steps", "500:800")
    assert code == 0, err
    window = page_data(tmp_path / "window.html")
    assert window["first_step"] == 500 and len(window["steps"]) == 300


@pytest.mark.parametrize("flags, problem", [
    (["--mode", "static", "--html", "x.html"], "continuous or chunked"),
    (["--html-steps", "0:10"], "give --html FILE"),
    (["--html", "x.html", "--html-steps", "9:3"], "0 <= A < B"),
    (["--html", "x.html", "--html-steps", "5000:"], "none in the window"),
    (["--explain", "99999"], "the run has"),
    (["--explain-request", "nobody"], "no request of that id"),
])
def test_bad_step_flags_are_refused_in_one_line(capsys, tmp_path, flags, problem):
    argv = [flag.replace("x.html", str(tmp_path / "x.html")) for flag in flags]
    code, _, err = servesim_here(capsys, "run", "--num-prompts", "3", *argv)
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


# -- in a real browser ---------------------------------------------------------------------------------

def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true and no Chromium on PATH: .ci/run installs Debian's chromium package")
    pytest.skip("no Chromium on PATH (chromium, chromium-browser or google-chrome): the browser "
                "tests need one; apt-get install chromium, or see .ci/run")


def open_page(page: Path, fragment: str, tmp_path: Path, *, screenshot: Path = None) -> str:
    """The page's DOM after its script ran (or a screenshot), offline; fails on console errors."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-extensions", "--proxy-server=127.0.0.1:9",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"]
    command += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run(command + [f"file://{page}#{fragment}"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    return done.stdout


class Elements(HTMLParser):
    """The elements of a dumped DOM that carry an id or a data-req, with their text."""

    def __init__(self, html: str):
        super().__init__()
        self.stack, self.by_id, self.reqs = [], {}, []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        element = {"tag": tag, "attrs": attrs, "text": "", "parents": [e["attrs"].get("id")
                                                                       for e in self.stack]}
        if tag not in ("br", "input", "meta", "img"):
            self.stack.append(element)
        if "id" in attrs:
            self.by_id[attrs["id"]] = element
        if "data-req" in attrs:
            self.reqs.append(element)

    def handle_endtag(self, tag):
        if self.stack and self.stack[-1]["tag"] == tag:
            self.stack.pop()

    def handle_data(self, data):
        for element in self.stack:
            element["text"] += data

    def requests_in(self, container: str, tag: str = "span") -> list[str]:
        return [e["attrs"]["data-req"] for e in self.reqs
                if e["parents"] and e["parents"][-1] == container and e["tag"] == tag]


@pytest.mark.parametrize("scenario", ["twelve requests", "preempt+prefix+spec", "a window"])
def test_every_step_in_the_browser_shows_what_the_scheduler_did(twelve, tmp_path, scenario):
    chromium()
    page, log, recorder = twelve if scenario != "preempt+prefix+spec" else make_page(tmp_path, MIXED)
    first = 0
    if scenario == "a window":  # the page starts from the state when step 100 begins
        first, page = 100, tmp_path / "window.html"
        code, _ = servesim_quiet(["run", *TWELVE, "--html", str(page), "--html-steps", "100:160"])
        assert code == 0
    dom = Elements(open_page(page, "dump", tmp_path))
    assert dom.by_id["errors"]["text"] == ""
    shown = [json.loads(line) for line in dom.by_id["dump"]["text"].splitlines()]
    records = recorder.records
    assert len(records) == len(log) and len(shown) == (60 if first else len(log))
    for number, view in enumerate(shown, start=first):
        line, record = log[number], records[number]
        running_after = records[number + 1].running_before if number + 1 < len(records) else []
        assert view["step"] == line["step"] == number
        assert view["scheduled"] == line["scheduled"]
        assert view["free"] == line["num_free_blocks"]
        assert view["running"] == running_after
        assert view["waiting"] == record.waiting_after
        assert view["reasons"] == expected_reasons(record), f"step {number}"


def test_a_fragment_opens_that_step_and_request(twelve, tmp_path):
    page, log, recorder = twelve
    step = 4
    dom = Elements(open_page(page, f"step={step}&req=1", tmp_path))
    assert dom.by_id["step-index"]["text"] == str(step)
    assert int(dom.by_id["free-blocks"]["text"]) == log[step]["num_free_blocks"]
    assert dom.requests_in("running") == recorder.records[step + 1].running_before
    assert dom.requests_in("waiting") == recorder.records[step].waiting_after
    scheduled = {e["attrs"]["data-req"]: int(e["attrs"]["data-tokens"]) for e in dom.reqs
                 if e["tag"] == "li" and e["parents"][-1] == "scheduled"}
    assert scheduled == log[step]["scheduled"]
    assert dom.by_id["sel-id"]["text"] == "1"
    for sentences in expected_reasons(recorder.records[step]).values():  # as --explain says
        for sentence in sentences:
            assert sentence in dom.by_id["decision-list"]["text"]


def test_the_page_draws_something(twelve, tmp_path):
    page, _, _ = twelve
    shot = tmp_path / "shot.png"
    open_page(page, "step=40&req=3", tmp_path, screenshot=shot)
    assert num_colours(shot.read_bytes()) > 20


def num_colours(png: bytes) -> int:
    """Distinct RGB(A) pixel values of a PNG (8-bit, no interlace), sampled row by row."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, b"", None
    while position < len(png):
        length = int.from_bytes(png[position:position + 4], "big")
        kind = png[position + 4:position + 8]
        body = png[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width = int.from_bytes(header[0:4], "big")
    channels = {2: 3, 6: 4}[header[9]]
    raw = zlib.decompress(idat)
    stride = 1 + width * channels
    colours = set()
    for row in range(0, len(raw) // stride, 7):
        line = raw[row * stride + 1:(row + 1) * stride]  # filtered bytes: enough to tell
        colours.update(line[i:i + channels] for i in range(0, len(line), channels * 5))
    return len(colours)


def test_compare_puts_the_continuous_modes_side_by_side(capsys, tmp_path):
    page, log = tmp_path / "compare.html", tmp_path / "compare.jsonl"
    code, _, err = servesim_here(capsys, "compare", "--mode", "static,continuous,chunked",
                                 "--num-prompts", "6", "--html", str(page), "--step-log", str(log))
    assert code == 0, err
    import html
    panes = re.findall(r'<h2>([^<]*)</h2><iframe title="[^"]*" srcdoc="([^"]*)"', page.read_text())
    assert [name for name, _ in panes] == ["CONTINUOUS", "CONTINUOUS+CHUNKED"]  # STATIC: no pool
    steps = [json.loads(line)["mode"] for line in log.read_text().splitlines()]
    for name, srcdoc in panes:
        data = json.loads(re.search(r"const DATA = (\{.*?\});\n", html.unescape(srcdoc),
                                    re.S).group(1))
        assert data["mode"] == name and len(data["steps"]) == steps.count(name)
    chromium()
    dom = Elements(open_page(page, "step=3", tmp_path))
    assert dom.by_id["step-index"]["text"] == "3"
