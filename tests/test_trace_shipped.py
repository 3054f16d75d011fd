"""The traces shipped in code/traces/data/: each read by its short name, its row count as its
README says, a `.gz` path read as a plain one, and a name that is neither refused in one line."""

import gzip
import re

import pytest

from conftest import servesim, servesim_here
from traces.replay import trace_workload
from traces.shipped import DATA, shipped_traces
from workload import WorkloadError

README_ROWS = {name: int(rows.replace(",", "")) for name, rows in re.findall(
    r"^\| `([\w-]+)` \| ([\d,]+) \|", (DATA / "README.md").read_text(encoding="utf-8"), re.M)}


def test_the_readme_lists_every_shipped_trace_and_no_other():
    assert set(README_ROWS) == set(shipped_traces())
    assert {"azure-conv", "azure-code", "mooncake-conversation", "mooncake-synthetic",
            "vidur-10k"} <= set(README_ROWS)


@pytest.mark.parametrize("name", sorted(README_ROWS))
def test_each_trace_has_the_rows_its_readme_says(name):
    with gzip.open(shipped_traces()[name], "rt", encoding="utf-8") as file:
        lines = [line for line in file if line.strip()]
    header = 0 if lines[0].lstrip().startswith("{") else 1
    assert len(lines) - header == README_ROWS[name]


@pytest.mark.parametrize("name", sorted(README_ROWS))
def test_each_trace_replays_by_its_short_name_and_is_named_so(name):
    workload = trace_workload(name, num_prompts=20)
    assert workload.params["trace"] == name and workload.params["num_requests"] == 20
    assert workload.description.startswith(f"trace {name} (")


def test_a_gz_path_reads_as_the_same_trace_uncompressed(tmp_path):
    plain = tmp_path / "conv.csv"
    plain.write_bytes(gzip.decompress(shipped_traces()["azure-conv"].read_bytes()))
    by_path = [(r.arrival_s, r.prompt_len) for r in
               trace_workload(str(shipped_traces()["azure-conv"]), num_prompts=50).make_requests()]
    uncompressed = [(r.arrival_s, r.prompt_len) for r in
                    trace_workload(str(plain), num_prompts=50).make_requests()]
    assert by_path == uncompressed and len(by_path) == 50


def test_a_file_of_that_name_is_read_before_the_shipped_trace(tmp_path):
    (tmp_path / "azure-conv").write_text("arrival_s,prompt_len,output_len\n0,10,5\n")
    result = servesim("run", "--trace", "azure-conv", cwd=tmp_path)
    assert result.returncode == 0 and "trace azure-conv (csv): 1 requests" in result.stdout


@pytest.mark.parametrize("content", [b"not gzip", gzip.compress(b"x" * 100)[:20]],
                         ids=["not-gzip", "cut-short"])
def test_a_broken_gz_file_is_one_line(tmp_path, content, capsys):
    path = tmp_path / "trace.csv.gz"
    path.write_bytes(content)
    code, out, err = servesim_here(capsys, "run", "--trace", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "cannot read trace" in err


def test_an_unknown_name_lists_the_shipped_ones():
    with pytest.raises(WorkloadError, match="nor a shipped trace: azure-code, azure-conv"):
        trace_workload("azure-chat")
