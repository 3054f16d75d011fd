"""README's "Workloads and traces" shows a trace replay and its output; the output must stay true."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Workloads and traces"


def code_blocks(markdown: str) -> list[str]:
    """The fenced blocks of `markdown`, in order, without their fences."""
    return markdown.split("```\n")[1::2]


def test_readme_trace_replay_prints_what_readme_shows():
    section = (ROOT / "README.md").read_text().split(SECTION, 1)[1]
    command, shown_output = code_blocks(section)[:2]
    argv = shlex.split(command)
    trace = ROOT / argv[argv.index("--trace") + 1]
    if not trace.exists():
        pytest.skip(f"the shared trace {trace} is not here")
    assert argv[:2] == ["python3", "code/main.py"]
    run = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert run.stdout == shown_output
