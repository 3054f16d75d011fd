"""Trace files in the four formats: what is read, what is skipped, and what is refused.

Each test writes its own small file. Prompts of 8,192 tokens or more cannot run under the default
max_model_len 8192; the files that hold one say so, and the totals leave it out.
"""

import json

import pytest

from config import Knobs
from conftest import servesim_here
from traces.replay import trace_workload
from workload import WorkloadError

AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"  # the real files end lines with CRLF
         "2023-11-16 18:17:03.9799600,400,3\r\n"
         "2023-11-16 18:17:04.0319600,300,2\r\n"
         "2023-11-16 18:17:05.5000000,100,4\r\n")
MOONCAKE = ('{"timestamp": 0, "input_length": 300, "output_length": 2, "hash_ids": [0]}\n'
            '{"timestamp": 250, "input_length": 9000, "output_length": 5, "hash_ids": '
            + json.dumps(list(range(18))) + '}\n'  # 18 blocks of 512 tokens cover 9,000
            '{"timestamp": 1000, "input_length": 100, "output_length": 3, "hash_ids": [2]}\n')
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,300,0,300,Conversation log\n"   # failed: skipped, before the first request
            "7,ChatGPT,200,3,203,Conversation log\n"
            "7.5,GPT-4,100,0,100,API log\n"            # failed
            "9,GPT-4,400,2,402,API log\n")
PLAIN_CSV = ("arrival_s,prompt_len,output_len,id\n"
             "0.5,100,2,a\n"
             "1.5,200,3,b\n")


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return str(path)


def replayed(workload) -> list[tuple]:
    """(id, arrival_s to the microsecond, prompt, output): a float holds a 2023 date to ~0.2 us."""
    return [(r.request_id, round(r.arrival_s, 6), r.prompt_len, r.max_tokens)
            for r in workload.make_requests()]


def run_json(argv: list[str], capsys) -> dict:
    code, out, err = servesim_here(capsys, "compare", *argv, "--format", "json", knobs=Knobs())
    assert code == 0, err
    return json.loads(out)


# -- reading each format --------------------------------------------------------------------

def test_azure_seven_digit_timestamps_become_gaps_from_the_first_request(tmp_path):
    workload = trace_workload(write(tmp_path, "azure.csv", AZURE))
    assert workload.params["trace_format"] == "azure"
    assert replayed(workload) == [("0", 0.0, 400, 3), ("1", 0.052, 300, 2),
                                  ("2", 1.52004, 100, 4)]


def test_mooncake_milliseconds_become_seconds(tmp_path):
    workload = trace_workload(write(tmp_path, "trace.jsonl", MOONCAKE))
    assert workload.params["trace_format"] == "mooncake"
    assert replayed(workload) == [("0", 0.0, 300, 2), ("1", 0.25, 9000, 5), ("2", 1.0, 100, 3)]


def test_burstgpt_skips_and_counts_failed_requests(tmp_path):
    workload = trace_workload(write(tmp_path, "burst.csv", BURSTGPT))
    assert workload.params["trace_format"] == "burstgpt"
    assert replayed(workload) == [("0", 0.0, 200, 3), ("1", 2.0, 400, 2)]
    assert workload.params["num_failed_rows_skipped"] == 2
    assert "2 failed requests skipped" in workload.description


def test_plain_csv_keeps_its_ids_and_its_gaps(tmp_path):
    workload = trace_workload(write(tmp_path, "plain.csv", PLAIN_CSV))
    assert replayed(workload) == [("a", 0.0, 100, 2), ("b", 1.0, 200, 3)]


def test_time_scale_two_stretches_every_gap(tmp_path):
    workload = trace_workload(write(tmp_path, "trace.jsonl", MOONCAKE), time_scale=2.0)
    assert [arrival_s for _, arrival_s, _, _ in replayed(workload)] == [0.0, 0.5, 2.0]
    assert workload.params["trace_span_s"] == 2.0


def test_num_prompts_takes_the_first_rows_and_reads_no_further(tmp_path):
    path = write(tmp_path, "plain.csv", PLAIN_CSV + "2.5,not-a-number,1,c\n")
    workload = trace_workload(path, num_prompts=2)  # the bad third row is never read
    assert [request_id for request_id, *_ in replayed(workload)] == ["a", "b"]


def test_named_format_overrides_detection_and_checks_the_header(tmp_path):
    path = write(tmp_path, "azure.csv", AZURE)
    with pytest.raises(WorkloadError) as error:
        trace_workload(path, trace_format="burstgpt")
    assert str(error.value) == (f"{path}:1: missing column Timestamp, Request tokens, Response "
                                "tokens; a burstgpt trace's header names Timestamp,Request "
                                "tokens,Response tokens")


# -- a run's totals are the sums over the rows used ------------------------------------------

@pytest.mark.parametrize("name, text, input_tokens, output_tokens, rejected", [
    ("azure.csv", AZURE, 400 + 300 + 100, 3 + 2 + 4, 0),
    ("trace.jsonl", MOONCAKE, 300 + 100, 2 + 3, 1),  # the 9,000-token prompt cannot run
    ("burst.csv", BURSTGPT, 200 + 400, 3 + 2, 0),     # failed rows are not requests
    ("plain.csv", PLAIN_CSV, 100 + 200, 2 + 3, 0),
])
def test_reported_token_totals_are_the_sums_over_the_rows(tmp_path, capsys, name, text,
                                                          input_tokens, output_tokens, rejected):
    document = run_json(["--trace", write(tmp_path, name, text)], capsys)
    for result in document["results"]:
        assert (result["total_input_tokens"], result["total_output_tokens"]) == (input_tokens,
                                                                               output_tokens)
        assert result["rejected"] == rejected


# -- bad traces: one line naming the file, the line and the problem ---------------------------

@pytest.mark.parametrize("name, text, line, problem", [
    ("plain.csv", "arrival_s,prompt_len,output_len\n0,100,2\n1,abc,3\n",
     3, "prompt_len must be a whole number of tokens, got 'abc'"),
    ("plain.csv", "arrival_s,prompt_len,output_len\n0,100\n",
     2, "missing value for output_len"),
    ("plain.csv", "arrival_s,prompt_len,output_len\n-1,100,2\n",
     2, "arrival_s must be a finite time >= 0, got -1"),
    ("burst.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "1,GPT-4,-5,2,-3,API log\n",
     2, "Request tokens must be an integer in [1, 10,000,000], got -5"),
    ("azure.csv", AZURE + "2023-11-16 18:17:04.0000000,10,1\r\n",
     5, "time goes backwards: 2023-11-16 18:17:04.0000000 is earlier than line 4's "
        "2023-11-16 18:17:05.5000000; rows must be in time order"),
    ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023 18:17,10,1\n",
     2, "TIMESTAMP must be a date and time like 2023-11-16 18:17:03.9799600, "
        "got '16/11/2023 18:17'"),
    ("trace.jsonl", MOONCAKE + '{"timestamp": 2000, "input_length": 10}\n',
     4, "missing field output_length"),
    ("trace.jsonl", MOONCAKE + "timestamp,input_length\n",
     4, "not a JSON object (Expecting value)"),
    ("trace.jsonl", '{"timestamp": 0, "input_length": 2.5, "output_length": 1}\n',
     1, "input_length must be a whole number of tokens, got '2.5'"),
])
def test_bad_row_names_file_line_and_problem(tmp_path, name, text, line, problem):
    path = write(tmp_path, name, text)
    with pytest.raises(WorkloadError) as error:
        trace_workload(path)  # before any mode runs
    assert str(error.value) == f"{path}:{line}: {problem}"


def test_unknown_header_names_the_formats_it_could_be(tmp_path):
    path = write(tmp_path, "odd.csv", "time,prompt,output\n0,1,1\n")
    with pytest.raises(WorkloadError, match=r"odd\.csv:1: cannot tell the trace format .*"
                                            r"azure: TIMESTAMP,ContextTokens,GeneratedTokens"):
        trace_workload(path)


def test_a_file_with_only_failed_requests_has_nothing_to_replay(tmp_path):
    path = write(tmp_path, "burst.csv", BURSTGPT.splitlines()[0] + "\n1,GPT-4,10,0,10,API log\n")
    with pytest.raises(WorkloadError, match=r"no requests to replay \(1 failed rows skipped\)"):
        trace_workload(path)


def test_a_trace_changed_after_it_was_read_serves_what_was_read(tmp_path):
    """The file is read once: every mode replays the rows the first pass checked and counted."""
    path = write(tmp_path, "plain.csv", PLAIN_CSV)
    workload = trace_workload(path)
    first = [(r.request_id, r.arrival_s) for r in workload.make_requests()]
    write(tmp_path, "plain.csv", PLAIN_CSV + "0.1,10,1,c\n")
    assert [(r.request_id, r.arrival_s) for r in workload.make_requests()] == first
    assert len(first) == workload.params["num_requests"]


def test_a_trace_is_kept_compressed_and_read_back_as_the_file_splits_its_lines(tmp_path):
    """Read once into gzip-compressed bytes (a fifth of a real trace's text, a quarter here): each
    pass decodes it line by line, CRLF, CR and a quoted line break kept as a file opened with
    newline="" keeps them, so the csv module reads the rows it would have."""
    from commands.user_input import CompressedText
    lines = ["arrival_s,prompt_len,output_len,id\r\n", "0.5,100,2,r0\r"] + [
        f"{i},100,2,r{i}\n" for i in range(1, 20_000)]
    path = write(tmp_path, "long.csv", "".join(lines))
    text = CompressedText("--trace long.csv", path, WorkloadError)
    assert len(text.data) < sum(map(len, lines)) / 3
    assert list(text.lines(1000)) == list(text.lines(1000)) == lines
    requests = list(trace_workload(path).make_requests())
    assert [r.request_id for r in requests[:2]] == ["r0", "r1"] and len(requests) == 20_000
    quoted = CompressedText("--trace q.csv", write(tmp_path, "q.csv", 'a,"b\nc"\r\nd\n'),
                            WorkloadError)
    assert list(quoted.lines(1000)) == ['a,"b\n', 'c"\r\n', "d\n"]


def test_a_gz_trace_whose_text_passes_the_cap_is_refused_on_the_first_pass(tmp_path):
    import gzip
    from commands.user_input import CompressedText
    path = tmp_path / "bomb.csv.gz"
    path.write_bytes(gzip.compress(b"arrival_s,prompt_len,output_len\n" + b"0,1,1\n" * 1000))
    text = CompressedText("--trace bomb.csv.gz", str(path), WorkloadError, what="trace",
                          max_bytes=4000, gzipped=True)
    with pytest.raises(WorkloadError, match="bomb.csv.gz: larger than 4,000 bytes"):
        list(text.lines(100))
