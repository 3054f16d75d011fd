"""Bad input, as a careless user or a script types it: every one refused the same way.

The promise, for each entry of the catalogue: exit status 2, one line on stderr that names the
flag or the file and what would be valid, no traceback, nothing on stdout, no file written or
left half-written, and the input trace exactly as it was. The catalogue runs in this process
(cli.main, no start-up cost); what only a process of its own can show (signals, a failing write,
argparse's own refusals end to end) runs in one.

To add a case: one row, (the argv, a piece of the line it must print). `{trace}` is a good trace
in the test's folder and `{dir}` the folder itself; a case that needs a file of its own adds it
to BAD_TRACES.
"""

import hashlib
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, servesim_here

GOOD_TRACE = "id,arrival_s,prompt_len,output_len\na,0,100,4\nb,0.5,200,3\nc,1.0,50,2\n"
SMALL = ["--num-prompts", "4"]

CATALOGUE = [
    # -- non-finite and out-of-range numbers --
    (["--batching-window-ms", "nan"], "--batching-window-ms must be a number in [0, 60,000] ms"),
    (["--batching-window-ms", "inf"], "--batching-window-ms must be a number in [0, 60,000] ms"),
    (["run", "--forward-model", "linear", "--linear-step-ms", "nan"], "--linear-step-ms must be"),
    (["run", "--forward-model", "linear", "--linear-decode-token-ms", "inf"],
     "--linear-decode-token-ms must be a number in [0, 60,000] ms, got inf"),
    (["--linear-prefill-token-ms", "-1"], "--linear-prefill-token-ms must be a number in [0, "),
    (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization must be a number in (0, 1]"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be a number in (0, 1]"),
    (["--tensor-parallel-size", "1000000"], "--tensor-parallel-size 1000000 does not split"),
    (["--tensor-parallel-size", "4096"], "choose from 1, 2, 4, 8, 16, 32, 64"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size must be an integer in [1, "),
    (["--num-gpu-blocks-override", "10000000000"],
     "--num-gpu-blocks-override must be an integer in [1, 1,048,576]"),
    (["--max-model-len", "0"], "--max-model-len must be an integer in [1, 10,000,000] tokens"),
    (["--max-model-len", "99999999999"], "--max-model-len must be an integer in [1, 10,000,000]"),
    (["--max-num-seqs", "0"], "--max-num-seqs must be an integer in [1, 1,000,000]"),
    (["--max-num-batched-tokens", "-5"], "--max-num-batched-tokens must be an integer in [1, "),
    (["--long-prefill-token-threshold", "-1"], "--long-prefill-token-threshold must be"),
    (["--block-size", "0"], "--block-size must be 1, 2, 4, 8 or a multiple of 16 in [16, "),
    (["--block-size", "24"], "or a multiple of 16 in [16, 10,000,000] tokens, got 24"),
    (["--num-prompts", "0"], "--num-prompts must be an integer in [1, 10,000,000], got 0"),
    (["--seed", "-1"], "--seed must be an integer in [0, 4,294,967,295]"),
    (["--num-prompts", "100000000000"], "--num-prompts must be an integer in [1, 10,000,000]"),
    (["--max-concurrency", "0"], "--max-concurrency must be an integer in [1, "),
    (["--request-rate", "nan"],
     "--request-rate must be a number in (0, 1,000,000,000] req/s, or inf, got nan"),
    (["--request-rate", "-2"], "--request-rate must be a number in (0, 1,000,000,000] req/s"),
    (["--burstiness", "inf"],
     "--burstiness must be a number in (0, 1,000,000] (1e6: gaps all but equal), got inf"),
    (["--burstiness", "0"], "--burstiness must be a number in (0, 1,000,000]"),
    (["--dataset-name", "random", "--random-input-len", "10000000000000"],
     "--random-input-len must be an integer in [1, 10,000,000] tokens"),
    (["--dataset-name", "random", "--random-range-ratio", "1"],
     "--random-range-ratio must be a number in [0, 1)"),
    (["--dataset-name", "normal", "--input-std", "1e308"],
     "--input-std must be a number in [0, 10,000,000] tokens"),
    (["--dataset-name", "normal", "--output-mean", "nan"], "--output-mean must be a number"),
    (["--goodput", "ttft:inf"], "--goodput 'ttft:inf': the target must be a number >= 0 ms"),
    (["--goodput", "tpot:nan"], "--goodput 'tpot:nan': the target must be"),
    (["run", "--metric-percentiles", "nan"], "--metric-percentiles takes a comma list"),
    (["--timeline", "0"], "--timeline must be an integer in [1, 10,000] steps, got 0"),
    (["--timeline", "100000000"], "--timeline must be an integer in [1, 10,000] steps"),
    (["sweep", "--request-rates", "1,nan"], "--request-rates takes a comma list of positive"),
    (["sweep", "--concurrencies", "0"], "--concurrencies takes a comma list of positive integers"),
    # -- finite values whose product is not: the clock would freeze or overflow --
    (["--request-rate", "1e-300"], "the requests arrive over"),
    (["--trace", "{trace}", "--trace-time-scale", "1e308"], "the requests arrive over 1e+308 s"),
    (["--forward-model", "linear", "--linear-step-ms", "0", "--linear-prefill-token-ms", "0"],
     "a step of one token would take no time"),
    # -- what vLLM refuses at start-up --
    (["--long-prefill-token-threshold", "9000"],
     "--long-prefill-token-threshold 9000 is above --max-model-len 8192 (vLLM refuses this)"),
    (["--mode", "chunked", "--max-num-batched-tokens", "128"],
     "--max-num-batched-tokens 128 is below MAX_NUM_SEQS in code/main.py 256"),
    (["--mode", "continuous", "--max-num-seqs", "9000"],
     "the unchunked budget max(--max-model-len, 2048) 8192 is below --max-num-seqs 9000"),
    (["--block-size", "8.5"], "--block-size"),
    (["--tensor-parallel-size", "3"], "does not split Llama-3.3-70B-Instruct FP8's 64 attention "
                                      "heads and 8 KV heads evenly"),
    (["--model", "qwen2.5-7b", "--tensor-parallel-size", "7"], "choose from 1, 2, 4, 28"),
    (["--mode", "continuous", "--max-num-batched-tokens", "4096"], "below --max-model-len 8192"),
    (["--enable-chunked-prefill", "--no-enable-chunked-prefill"],
     "--enable-chunked-prefill and --no-enable-chunked-prefill both given"),
    (["--mode", "chunked", "--no-enable-chunked-prefill"], "contradicts --mode"),
    # -- advice that is itself valid --
    (["--block-size", "1048576"], "any one of these fits: --block-size 16,"),
    (["--gpu", "h100-sxm5"], "any one of these fits: --max-model-len "),
    (["--model", "llama-3.1-405b-fp8", "--gpu", "l4", "--tensor-parallel-size", "8"],
     "any one of these fits: --tensor-parallel-size 32"),
    (["--mode", "static", "--max-num-seqs", "1000000"],
     "any one of these fits: --max-num-seqs 256"),
    # -- output paths --
    (["--step-log", "{dir}/newdir/"], "ends with '/', so it names a directory"),
    (["--step-log", "{dir}/no-such-dir/steps.jsonl"], "does not exist; create it"),
    (["--svg", ""], "--svg '': an empty path; give a file name"),
    (["run", "--save-detailed", ""], "--save-detailed '': an empty path"),
    (["--step-log", "{dir}"], "is a directory; give a file path"),
    (["--step-log", "/dev/null"], "is a character device, not a regular file"),
    (["--trace", "{trace}", "--step-log", "{trace}"], "is the same file as --trace"),
    (["--svg", "{dir}/out.svg", "--step-log", "{dir}/./out.svg"],
     "--step-log {dir}/./out.svg is the same file as --svg {dir}/out.svg"),
    (["sweep", "--trace", "{trace}"], "sweep --trace varies --concurrencies"),
    # -- what the sweep cannot vary --
    (["sweep", "--request-rates", "4,2"], "--request-rates must rise from point to point"),
]

BAD_TRACES = [  # (file name, contents, a piece of the line)
    ("dup.csv", "id,arrival_s,prompt_len,output_len\na,0,10,2\nb,1,10,2\na,2,10,2\n",
     "dup.csv:4: request id 'a' is already line 2's"),
    ("blank.csv", "id,arrival_s,prompt_len,output_len\na,0,10,2\n,1,10,2\n",
     "blank.csv:3: no request id, but line 2's request has one"),
    ("late.csv", "id,arrival_s,prompt_len,output_len\n,0,10,2\n7,1,10,2\n",
     "late.csv:3: request id '7', but line 2's request has none"),
    ("gap.csv", "arrival_s,prompt_len,output_len\n0,10,2\n1e300,10,2\n",
     "the requests arrive over 1e+300 s of virtual time"),
    ("nan.csv", "arrival_s,prompt_len,output_len\nnan,10,2\n", "arrival_s must be a finite time"),
    ("huge.csv", "arrival_s,prompt_len,output_len\n0,100000000000000000000,2\n",
     "huge.csv:2: prompt_len must be an integer in [1, 10,000,000]"),
    ("back.csv", "arrival_s,prompt_len,output_len\n5,10,2\n1,10,2\n", "time goes backwards"),
    ("empty.csv", "", "empty first line"),
    ("binary.csv", "\udcff", "not a text file"),
    ("cake.jsonl", '{"timestamp": 0, "input_length": 1e400, "output_length": 2}\n',
     "1e400 is too large for a number"),
]


def snapshot(folder) -> dict:
    """Every file under `folder` and a digest of its bytes."""
    files = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, folder)] = hashlib.sha256(file.read()).hexdigest()
    return files


def refusal(capsys, argv) -> tuple[int, str, str]:
    """cli.main in this process; argparse's own refusals exit through SystemExit."""
    try:
        return servesim_here(capsys, *argv)
    except SystemExit as stop:
        captured = capsys.readouterr()
        return stop.code, captured.out, captured.err


def assert_refused_in_one_line(code, out, err, says):
    lines = err.splitlines()
    assert code == 2 and out == "", (code, out[:200], err)
    assert len(lines) == 1 and lines[0].startswith("servesim: error: "), err
    assert says in lines[0], lines[0]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.csv").write_text(GOOD_TRACE, encoding="utf-8")
    return tmp_path


def test_the_catalogue_is_long_enough():
    assert len(CATALOGUE) + len(BAD_TRACES) >= 40


@pytest.mark.parametrize("argv, says", CATALOGUE, ids=[" ".join(a) for a, _ in CATALOGUE])
def test_a_bad_input_is_refused_in_one_line_and_nothing_is_written(folder, capsys, argv, says):
    fill = {"trace": str(folder / "trace.csv"), "dir": str(folder)}
    argv = [arg.format(**fill) for arg in argv]
    if "--num-prompts" not in argv:
        argv += SMALL
    before = snapshot(folder)
    assert_refused_in_one_line(*refusal(capsys, argv), says.format(**fill))
    assert snapshot(folder) == before  # the trace untouched, nothing written or left behind


@pytest.mark.parametrize("name, text, says", BAD_TRACES, ids=[name for name, _, _ in BAD_TRACES])
def test_a_bad_trace_is_refused_in_one_line_and_left_as_it_was(folder, capsys, name, text, says):
    path = folder / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    before = snapshot(folder)
    argv = ["--trace", str(path), "--step-log", str(folder / "steps.jsonl"), "--svg",
            str(folder / "charts.svg")]
    assert_refused_in_one_line(*refusal(capsys, argv), says)
    assert snapshot(folder) == before


def test_a_trace_line_too_long_is_refused_without_reading_it_whole(folder, capsys):
    from traces.formats import MAX_LINE_CHARS
    path = folder / "one-line.csv"
    with open(path, "w", encoding="utf-8") as file:
        file.write("arrival_s,prompt_len,output_len\n0,10,2\n")
        file.write("9" * (MAX_LINE_CHARS + 10) + "\n")
    code, out, err = refusal(capsys, ["--trace", str(path)])
    assert_refused_in_one_line(code, out, err, "one-line.csv:3: longer than 16,777,216 characters")


# -- in a process of its own ---------------------------------------------------------------------

def start(argv, cwd, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "code" / "main.py"), *argv], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


@pytest.mark.parametrize("argv, says", [
    (["--block-size", "x"], "argument --block-size: invalid int value: 'x'"),
    (["--enable-chunked-prefill", "--no-enable-chunked-prefill"], "both given"),
    (["--trace", "no-such-file.csv"], "cannot read trace"),
])
def test_end_to_end_a_refusal_is_one_line_and_exit_status_2(tmp_path, argv, says):
    result = start(argv, tmp_path)
    out, err = result.communicate()
    assert_refused_in_one_line(result.returncode, out, err, says)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv", [["vidur10k"], ["decode-heavy", "--quik"]])
def test_the_benchmark_refuses_a_workload_it_does_not_have_instead_of_running_them_all(
        tmp_path, argv):
    result = subprocess.run([sys.executable, str(ROOT / "code" / "commands" / "benchmark.py"),
                             *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert_refused_in_one_line(result.returncode, result.stdout, result.stderr,
                               f"unknown workload or flag {argv[-1]!r}")
    assert "vidur-10k, synthetic-10k" in result.stderr  # what would be valid


@pytest.mark.parametrize("stop, status, says", [
    (signal.SIGTERM, 143, "servesim: terminated (SIGTERM); no partial file is left behind"),
    (signal.SIGINT, 130, "servesim: interrupted (Ctrl-C); no partial file is left behind"),
])
def test_a_stopped_run_leaves_no_partial_file_and_exits_quietly(tmp_path, stop, status, says):
    # Long enough to be stopped while its step log streams into a partial file.
    trace = tmp_path / "trace.csv"
    trace.write_text(GOOD_TRACE, encoding="utf-8")
    before = snapshot(tmp_path)
    process = start(["run", "--num-prompts", "20000", "--request-rate", "50", "--step-log",
                     str(tmp_path / "steps.jsonl")], tmp_path,
                    env={**os.environ, "SERVESIM_CHECK_INVARIANTS": ""})
    deadline = time.monotonic() + 60
    while not any(name.endswith(".partial") for name in os.listdir(tmp_path)):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.02)
    process.send_signal(stop)
    out, err = process.communicate(timeout=60)
    err = "".join(line for line in err.splitlines(keepends=True)  # less estimate.py's line
                  if not line.startswith("servesim: a long run ahead"))
    assert (process.returncode, out, err) == (status, "", says + "\n")
    assert snapshot(tmp_path) == before


def test_a_write_that_fails_after_the_run_is_one_line_and_leaves_no_partial_file(tmp_path):
    # A file-size limit of 64 KB makes the step log's writes fail as a full disk would.
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    process = start(["run", "--num-prompts", "200", "--step-log", str(tmp_path / "steps.jsonl")],
                    tmp_path, preexec_fn=limit_file_size)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1 and out == "", err
    assert err == (f"servesim: error: --step-log {tmp_path / 'steps.jsonl'}: cannot write "
                   "(File too large)\n")
    assert os.listdir(tmp_path) == []
