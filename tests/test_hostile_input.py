"""Hostile input, as someone trying to break servesim types it: each class refused by a rule.

The rules (code/commands/README.md, "Bad input"), each tested on every place it applies rather
than on one example: whatever JSON the user hands in, every file it reads, every file it writes,
every knob of code/main.py, every command. The promise, as in test_bad_input.py: exit status 2,
one line on stderr, nothing on stdout, nothing written, the folder exactly as it was. Most cases
run in this process (cli.main); signals and the terminal's encoding need a process of their own.
"""

import hashlib
import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from conftest import ROOT, servesim_here

GOOD_TRACE = "id,arrival_s,prompt_len,output_len\na,0,100,4\nb,0.5,200,3\nc,1.0,50,2\n"
SMALL = ["--num-prompts", "4"]
SPEC = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": %s}'


def listing(folder) -> dict:
    """Every entry under `folder`: a regular file's digest, a link's target, another's kind
    (never opened: a FIFO would block)."""
    entries = {}
    for directory, names, files in os.walk(folder):
        for name in names + files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                entries[path] = "-> " + os.readlink(path)
            elif stat.S_ISREG(mode):
                with open(path, "rb") as file:
                    entries[path] = hashlib.sha256(file.read()).hexdigest()
            else:
                entries[path] = stat.filemode(mode)
    return entries


def cli_here(capsys, argv, knobs=None) -> tuple[int, str, str]:
    try:
        return servesim_here(capsys, *argv, knobs=knobs)
    except SystemExit as stop:  # argparse's own refusals
        captured = capsys.readouterr()
        return stop.code, captured.out, captured.err


def assert_one_line_refusal(code, out, err, says=""):
    lines = err.splitlines()
    assert code == 2 and out == "", (code, out[:200], err)
    assert len(lines) == 1 and lines[0].startswith("servesim: error: "), err
    assert "Traceback" not in err and says in lines[0], lines[0]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text(GOOD_TRACE, encoding="utf-8")
    return tmp_path


# -- one JSON reader: every carrier of user JSON, every hostile value ---------------------------

HOSTILE_JSON_VALUES = [  # (a JSON value, a piece of the refusal)
    ("[" * 5000 + "]" * 5000, "nested more than"),
    ("{\"a\": " * 200 + "1" + "}" * 200, "nested more than"),
    ("9" * 5000, "digits"),
    ("-" + "9" * 400, "digits"),
    ("12345678901234567890", "digits"),
    ("1e999", "too large for a number"),
    ("-1e400", "too large for a number"),
    ("NaN", "not a finite number"),
    ("Infinity", "not a finite number"),
    ("-Infinity", "not a finite number"),
    ('"\\ud800"', "surrogate"),
]


def observed_file(folder, value: str) -> list[str]:
    path = folder / "observed.json"
    path.write_text('{"mean_ttft_ms": 10, "request_throughput": %s}' % value, encoding="utf-8")
    return ["diagnose", "--observed", str(path), *SMALL]


def mooncake_trace(folder, value: str) -> list[str]:
    path = folder / "trace.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "x": %s}\n' % value,
                    encoding="utf-8")
    return ["run", "--trace", str(path), "--step-log", str(folder / "steps.jsonl")]


def speculative_flag(folder, value: str) -> list[str]:
    return ["run", "--speculative-config", SPEC % value, "--svg", "charts.svg", *SMALL]


CARRIERS = {"--observed": observed_file, "mooncake --trace": mooncake_trace,
            "--speculative-config": speculative_flag}


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("value, says", HOSTILE_JSON_VALUES,
                         ids=[f"{v[:12]}..{len(v)}" for v, _ in HOSTILE_JSON_VALUES])
def test_hostile_json_is_refused_in_one_line_wherever_the_user_hands_it_in(folder, capsys,
                                                                           carrier, value, says):
    argv = CARRIERS[carrier](folder, value)
    before = listing(folder)
    assert_one_line_refusal(*cli_here(capsys, argv), says)
    assert listing(folder) == before


def test_an_over_long_json_flag_is_refused_before_it_is_parsed(capsys):
    argv = ["run", "--speculative-config", SPEC % ("1" + " " * 2**20), *SMALL]
    assert_one_line_refusal(*cli_here(capsys, argv), "longer than 1,048,576 characters")


def test_the_reader_parses_what_is_sane_as_json_does():
    from commands.user_input import parse_json
    text = '{"a": [1, 2.5, -3e10, "é", "\\ud83d\\ude00", null, true], "b": {"c": "[{"}}'
    assert parse_json(text) == json.loads(text)


# -- a file read: regular files only, by kind, before opening ---------------------------------

def special_files(folder) -> dict:
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "socket"))
    server.close()
    (folder / "dir").mkdir()
    return {"a pipe (FIFO)": str(fifo), "a character device": "/dev/zero",
            "a socket": str(folder / "socket"), "a directory": str(folder / "dir")}


@pytest.mark.parametrize("flag", ["--trace", "--observed"])
def test_a_special_file_to_read_is_refused_by_its_kind_without_blocking(folder, capsys, flag):
    command = ["diagnose", *SMALL] if flag == "--observed" else ["run"]
    for kind, path in special_files(folder).items():
        before = listing(folder)
        assert_one_line_refusal(*cli_here(capsys, [*command, flag, path]),
                                f"is {kind}, not a regular file")
        assert listing(folder) == before


@pytest.mark.parametrize("flag", ["--trace", "--observed"])
def test_a_file_to_read_that_is_missing_or_not_text_is_one_line(folder, capsys, flag):
    command = ["diagnose", *SMALL] if flag == "--observed" else ["run"]
    (folder / "binary").write_bytes(b"\xff\xfe\x00garbage")
    for path, says in [("missing", "no such file"), ("binary", "not a text file"),
                       ("x" * 300, "File name too long")]:
        assert_one_line_refusal(*cli_here(capsys, [*command, flag, path]), says)


def test_a_file_to_read_is_capped_in_size_whatever_its_size_says(folder):
    from commands.user_input import read_text_file
    from config import ConfigError
    (folder / "big.json").write_text("1" * 2048, encoding="utf-8")
    for path in ("big.json", "/proc/self/environ"):  # /proc's files say they hold 0 bytes
        with pytest.raises(ConfigError, match="larger than 16 bytes"):
            read_text_file(f"--observed {path}", path, ConfigError, max_bytes=16)


HOSTILE_IDS = [("csv", 'arrival_s,prompt_len,output_len,id\n0,10,2,"a\nb"\n', "printable"),
               ("csv", "arrival_s,prompt_len,output_len,id\n0,10,2,a\x1b[2Jb\n", "printable"),
               ("csv", f"arrival_s,prompt_len,output_len,id\n0,10,2,{'x' * 300}\n", "256"),
               ("jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "id": "\\t"}',
                "printable"),
               ("jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "id": [1]}',
                "a string or an integer"),
               ("jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "id": 1.5}',
                "a string or an integer"),
               ("jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "id": true}',
                "a string or an integer")]


@pytest.mark.parametrize("suffix, text, says", HOSTILE_IDS)
def test_a_request_id_must_be_printable_text(folder, capsys, suffix, text, says):
    (folder / f"ids.{suffix}").write_text(text + "\n", encoding="utf-8")
    assert_one_line_refusal(*cli_here(capsys, ["run", "--trace", f"ids.{suffix}"]), says)


def test_a_trace_is_read_once_so_every_mode_replays_the_same_rows(folder, capsys):
    from traces.replay import trace_workload
    workload = trace_workload(str(folder / "trace.csv"))
    (folder / "trace.csv").write_text(GOOD_TRACE + "d,0.2,10,1\n", encoding="utf-8")
    ids = [[r.request_id for r in workload.make_requests()] for _ in range(2)]
    assert ids == [["a", "b", "c"]] * 2 and workload.params["num_requests"] == 3


# -- a file written: followed through a link to a regular file, or refused up front ------------

OUTPUT_FLAGS = [["run", "--svg", "{path}"], ["run", "--step-log", "{path}"],
                ["run", "--save-detailed", "{path}"], ["sweep", "--svg", "{path}"]]


def bad_output_paths(folder) -> list[tuple[str, str]]:
    os.symlink("nowhere", folder / "dangling")
    os.symlink("loop", folder / "loop")
    os.symlink("/dev/null", folder / "to-a-device")
    return [(str(folder / "dangling"), "does not exist"), (str(folder / "loop"), "a loop"),
            (str(folder / "to-a-device"), "not a regular file"), ("/dev/null", "character device"),
            ("x" * 300 + ".svg", "File name too long"), ("/proc/servesim.svg", "no file can be"),
            ("/proc/self/x.svg", "no file can be"), (str(folder), "is a directory"),
            ("no-dir/x.svg", "does not exist"), ("", "an empty path"), ("d/", "names a directory")]


@pytest.mark.parametrize("argv", OUTPUT_FLAGS, ids=[" ".join(a[:2]) for a in OUTPUT_FLAGS])
def test_an_output_path_that_cannot_be_a_regular_file_is_refused_up_front(folder, capsys, argv):
    for path, says in bad_output_paths(folder):
        before = listing(folder)
        command = [arg.format(path=path) for arg in argv] + SMALL
        assert_one_line_refusal(*cli_here(capsys, command), says)
        assert listing(folder) == before


@pytest.mark.parametrize("character", ["\n", "\r", "\t", "\x1b", "\x00", "\u2028", "\x85"])
def test_a_control_character_in_a_path_is_printed_escaped_on_one_line(folder, capsys, character):
    path = f"no{character}dir/x.svg"
    code, out, err = cli_here(capsys, ["run", "--svg", path, *SMALL])
    if character == "\x00":  # the OS refuses it in any path
        assert_one_line_refusal(code, out, err)
    else:
        assert_one_line_refusal(code, out, err, "does not exist")
    assert character not in err[:-1] and len(err.splitlines()) == 1


def test_an_output_through_a_link_writes_the_file_it_points_to_and_keeps_the_link(folder, capsys):
    (folder / "real.svg").write_text("old", encoding="utf-8")
    os.symlink("real.svg", folder / "link.svg")
    code, _, err = cli_here(capsys, ["run", "--svg", "link.svg", *SMALL])
    assert code == 0, err
    assert os.readlink(folder / "link.svg") == "real.svg"
    assert (folder / "real.svg").read_text(encoding="utf-8").startswith("<svg")
    assert not [name for name in os.listdir(folder) if name.endswith(".partial")]


# -- the knobs of code/main.py: by type, in one place, for every command -------------------------

COMMANDS = [["compare"], ["run"], ["sweep"], ["kv-waste"], ["lesson-check"], ["diagnose"],
            ["presets"], ["calibration"], []]
HOSTILE_KNOBS = [("max_num_batched_tokens", "512"), ("max_num_batched_tokens", None),
                 ("max_num_batched_tokens", 512.0), ("block_size", 16 + 0j), ("block_size", True),
                 ("max_num_seqs", -5), ("max_num_seqs", False), ("max_num_seqs", 10**30),
                 ("compared_modes", "naive"), ("compared_modes", None),
                 ("compared_modes", ["naive", 3]), ("compared_modes", []),
                 ("compared_modes", ["turbo"]), ("compared_modes", {"naive": 1})]
KNOB_NAMES = {"max_num_batched_tokens": "MAX_NUM_BATCHED_TOKENS", "block_size": "BLOCK_SIZE",
              "max_num_seqs": "MAX_NUM_SEQS", "compared_modes": "COMPARED_MODES"}


@pytest.mark.parametrize("field, value", HOSTILE_KNOBS, ids=[f"{f}={v!r}" for f, v in HOSTILE_KNOBS])
def test_a_knob_of_the_wrong_type_or_range_is_refused_by_every_command(capsys, field, value):
    import main
    knobs = replace(main.knobs(), **{field: value})
    for command in COMMANDS:
        assert_one_line_refusal(*cli_here(capsys, command, knobs=knobs),
                                f"{KNOB_NAMES[field]} in code/main.py")


# -- sweep's budget list: served or refused, for every mode --------------------------------------

@pytest.mark.parametrize("modes", ["static", "naive", "naive,chunked", "all", "static,continuous"])
def test_a_budget_sweep_with_a_mode_without_a_token_budget_is_refused(folder, capsys, modes):
    argv = ["sweep", "--max-num-batched-tokens", "256,512", "--mode", modes, *SMALL]
    assert_one_line_refusal(*cli_here(capsys, argv), "do")


def test_a_budget_sweep_serves_every_mode_with_a_token_budget(capsys):
    code, out, err = cli_here(capsys, ["sweep", "--max-num-batched-tokens", "1024,2048",
                                       "--max-model-len", "1024", "--mode", "continuous,chunked",
                                       "--dataset-name", "random", "--random-input-len", "64",
                                       "--random-output-len", "4", "--format", "json", *SMALL])
    assert code == 0, err
    modes = {result["mode"] for result in json.loads(out)["results"]}
    assert modes == {"CONTINUOUS", "CONTINUOUS+CHUNKED"}


# -- SERVESIM_CHECK_INVARIANTS: known values only ------------------------------------------------

@pytest.mark.parametrize("value", ["garbage", "2", "yes", "true", "1 1", "every"])
def test_an_unknown_invariant_setting_is_refused_before_any_run(capsys, monkeypatch, value):
    monkeypatch.setenv("SERVESIM_CHECK_INVARIANTS", value)
    assert_one_line_refusal(*cli_here(capsys, ["run", *SMALL]), "SERVESIM_CHECK_INVARIANTS")


@pytest.mark.parametrize("value, checks", [("0", False), ("", False), ("1", True),
                                           ("every-request", True)])
def test_zero_turns_the_invariant_checks_off(capsys, monkeypatch, value, checks):
    from commands import serving
    made = []

    class Checker(serving.InvariantChecker):
        def __init__(self, *args, **options):
            made.append(self)
            super().__init__(*args, **options)

    monkeypatch.setattr(serving, "InvariantChecker", Checker)
    monkeypatch.setenv("SERVESIM_CHECK_INVARIANTS", value)
    code, _, err = cli_here(capsys, ["run", *SMALL])
    assert code == 0 and bool(made) == checks, err


# -- no metric below zero ------------------------------------------------------------------------

def test_a_queue_time_never_rounds_below_zero(folder, capsys):
    # Arriving at t, served by a step of d: (t + d) - d is an ulp below t for these figures.
    t, d = 15.999546670238592, (0.2 + 0.04 * 100) / 1000
    assert (t + d) - d < t
    (folder / "ulp.csv").write_text(f"arrival_s,prompt_len,output_len\n0,100,1\n{t!r},100,1\n",
                                    encoding="utf-8")
    code, out, err = cli_here(capsys, ["compare", "--trace", "ulp.csv", "--forward-model",
                                       "linear", "--format", "json"])
    assert code == 0, err
    for result in json.loads(out)["results"]:
        negative = {k: v for k, v in result.items() if isinstance(v, (int, float)) and v < 0}
        assert not negative, (result["mode"], negative)


# -- the terminal: one line whatever a message quotes, any encoding ------------------------------

ASCII_IDS = "arrival_s,prompt_len,output_len,id\n0,10,2,café\n0.1,10,2,日本\n"


def test_output_survives_an_ascii_terminal(folder):
    (folder / "ids.csv").write_text(ASCII_IDS, encoding="utf-8")
    result = subprocess.run([sys.executable, str(ROOT / "code" / "main.py"), "run", "--trace",
                             "ids.csv", "--timeline-at", "request:café"], capture_output=True,
                            cwd=folder, env={**os.environ, "PYTHONIOENCODING": "ascii",
                                             "LANG": "C", "LC_ALL": "C"})
    assert (result.returncode, result.stderr) == (0, b"")
    assert b"caf\\xe9" in result.stdout


@pytest.mark.parametrize("argv, code, escaped", [
    (["--block-table", "日本"], 0, "\\u65e5\\u672c"),
    (["--block-table", "nobody-ñ"], 2, "nobody-\\xf1"),
    (["--timeline-at", "request:ñ\n"], 2, "request:\\xf1\\n")])
def test_an_ascii_stream_gets_escapes_not_a_traceback(folder, monkeypatch, argv, code, escaped):
    import main
    from commands import cli
    (folder / "ids.csv").write_text(ASCII_IDS, encoding="utf-8")
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    err = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="backslashreplace")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main(["run", "--trace", "ids.csv", *argv], main.simulate, main.knobs()) == code
    out.flush()
    err.flush()
    text = (out if code == 0 else err).buffer.getvalue().decode("ascii")
    assert escaped in text and (code == 0 or text.count("\n") == 1)


def test_one_line_escapes_every_unprintable_character():
    from commands.cli import one_line
    text = "a\nb\rc\td\x1be\u2028f\x85g\ud800h é 日本"
    assert one_line(text) == "a\\nb\\rc\\td\\x1be\\u2028f\\x85g\\ud800h é 日本"


# -- long work shows itself ----------------------------------------------------------------------

def test_a_long_run_is_announced_with_its_size_before_it_starts():
    import main
    from commands import cli, estimate, flags
    from commands.workload_flags import _workload
    args = cli.build_parser(main.knobs()).parse_args(["run", "--num-prompts", "10000000"])
    config, _ = flags.config_from_args(args, main.knobs())
    stream = io.StringIO()
    estimate.new_command()
    size = estimate.check_size(_workload(args, config), config, stream=stream)
    line = stream.getvalue()
    assert line.startswith("servesim: a long run ahead: 10,000,000 requests") and "GiB" in line
    assert line.count("\n") == 1 and size.num_requests == 10_000_000
    assert size.output_tokens > 10_000_000  # every request has outputs


def test_a_run_the_memory_cannot_hold_is_refused_with_the_figure(capsys, monkeypatch):
    from commands import estimate
    monkeypatch.setattr(estimate, "available_memory_bytes", lambda: 2 * 2**30)
    code, out, err = cli_here(capsys, ["run", "--num-prompts", "5000000", "--request-rate", "inf"])
    assert_one_line_refusal(code, out, err, "GiB of memory")
    assert "1.5 GiB this machine can give now" in err


def test_only_a_workload_sent_at_once_is_sure_to_keep_every_request_waiting(monkeypatch):
    """A workload sent over time keeps few requests waiting while the engine keeps up: it is
    held to what it needs at least (refused only if that cannot fit), and its line says how
    much more an engine that cannot keep up would take; sent at once, every request waits."""
    import main
    from commands import cli, estimate, flags
    from commands.workload_flags import _workload
    from config import ConfigError
    monkeypatch.setattr(estimate, "available_memory_bytes", lambda: 2 * 2**30)
    sizes = {}
    for rate in ("4", "inf"):
        args = cli.build_parser(main.knobs()).parse_args(
            ["run", "--num-prompts", "5000000", "--request-rate", rate])
        config, _ = flags.config_from_args(args, main.knobs())
        estimate.new_command()
        stream = io.StringIO()
        try:
            sizes[rate] = estimate.check_size(_workload(args, config), config, stream=stream)
            line = stream.getvalue()
        except ConfigError as refusal:
            sizes[rate], line = None, str(refusal)
        if rate == "4":
            assert "of memory (up to " in line and "waits at once" in line
    assert sizes["inf"] is None  # 5,000,000 requests waiting at once cannot fit in 1.5 GiB
    over_time = sizes["4"]
    assert over_time.memory_bytes < 1.5 * 2**30 < over_time.most_memory_bytes


def test_a_small_run_says_nothing_of_its_size(capsys):
    code, _, err = cli_here(capsys, ["run", *SMALL])
    assert code == 0 and err == ""


def test_the_progress_line_names_the_run_it_follows():
    from commands.progress import CHECK_EVERY_STEPS, Progress

    class Recorder:
        num_steps, num_ended = CHECK_EVERY_STEPS, 3

    stream = io.StringIO()
    wall = iter([0.0, 5.0])
    progress = Progress("point 2/8 (request_rate 4), CONTINUOUS", 10, stream=stream,
                        wall_clock=lambda: next(wall), command_started_s=0.0)
    progress(Recorder(), 1.0)
    assert stream.getvalue().startswith("\rpoint 2/8 (request_rate 4), CONTINUOUS: 1.0 s")


def test_run_with_ten_million_prompts_says_so_first(tmp_path):
    process = subprocess.Popen([sys.executable, str(ROOT / "code" / "main.py"), "run",
                                "--num-prompts", "10000000"], cwd=tmp_path, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = process.stderr.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert first.startswith("servesim: a long run ahead: 10,000,000 requests"), first
    assert (process.returncode, out) == (143, "")
    assert err == "servesim: terminated (SIGTERM); no partial file is left behind\n"


# -- signals: any of them, at any moment, in any number ------------------------------------------

def start_long_run(folder) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "code" / "main.py"), "run",
                             "--num-prompts", "5000", "--request-rate", "50", "--step-log",
                             str(folder / "steps.jsonl")], cwd=folder, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "SERVESIM_CHECK_INVARIANTS": ""})


def wait_for_partial(process, folder) -> None:
    while not any(name.endswith(".partial") for name in os.listdir(folder)):
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.01)


@pytest.mark.parametrize("signals", [(signal.SIGHUP,), (signal.SIGTERM, signal.SIGINT),
                                     (signal.SIGQUIT, signal.SIGUSR1, signal.SIGHUP)],
                         ids=["SIGHUP", "TERM+INT", "QUIT+USR1+HUP"])
def test_any_signal_leaves_one_line_and_no_partial_file(tmp_path, signals):
    before = listing(tmp_path)
    process = start_long_run(tmp_path)
    wait_for_partial(process, tmp_path)
    for signum in signals:
        process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    lines = [line for line in err.splitlines() if not line.startswith("servesim: a long run")]
    assert process.returncode in {128 + s for s in signals} and out == "", err
    assert len(lines) == 1 and "no partial file is left behind" in lines[0], err
    assert listing(tmp_path) == before


def test_a_signal_while_the_modules_load_is_one_line(tmp_path):
    # main.py installs the handlers first thing; a signal before any command runs exits at once.
    script = (f"import os, signal, sys; sys.path.insert(0, {str(ROOT / 'code')!r}); "
              "from commands import stopping; stopping.install(); "
              "os.kill(os.getpid(), signal.SIGINT); import main")
    process = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, text=True,
                             capture_output=True, timeout=60)
    assert (process.returncode, process.stdout) == (130, "")
    assert process.stderr == "servesim: interrupted (Ctrl-C); no partial file is left behind\n"
