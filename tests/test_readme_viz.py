"""README's "Seeing what the scheduler did" cannot rot: every command in it runs again here.

Each ```console block starts with `$ python3 code/main.py ...`; the lines pasted under it must
appear, in order and together, in what the command prints now, and every chart it writes under
outputs/ must equal the committed file byte for byte. When the simulator changes on purpose,
rerun the command named in the failure and paste or commit its output.
"""

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

import cli
import main

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Seeing what the scheduler did"
KNOBS = {"modes": main.MODES, "max_num_batched_tokens": main.MAX_NUM_BATCHED_TOKENS,
         "block_size": main.BLOCK_SIZE, "max_num_seqs": main.MAX_NUM_SEQS}


def section_text() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index(SECTION)
    following = readme.find("\n## ", start + len(SECTION))
    return readme[start:] if following == -1 else readme[start:following]


def console_blocks() -> list[tuple[str, list[str]]]:
    """(command line, pasted output lines) for every ```console block of the section."""
    blocks = re.findall(r"```console\n\$ (python3 code/main\.py[^\n]*)\n(.*?)```",
                        section_text(), flags=re.DOTALL)
    return [(command, output.splitlines()) for command, output in blocks]


def run_command(command: str, tmp_path: Path) -> tuple[list[str], dict]:
    """Run a README command in-process, writing its outputs/ files under tmp_path instead."""
    argv = shlex.split(command)[2:]
    written = {}
    for i, arg in enumerate(argv):
        if arg.startswith("outputs/"):
            written[arg] = tmp_path / Path(arg).name
            argv[i] = str(written[arg])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(argv, KNOBS, main.simulate) == 0
    return [line.rstrip() for line in printed.getvalue().splitlines()], written


def test_the_section_shows_a_run_a_timeline_a_chart_and_a_sweep():
    commands = [command for command, _ in console_blocks()]
    assert any(" run " in command for command in commands)
    assert any("--timeline" in command and "continuous,chunked" in command
               for command in commands)
    assert any(" sweep " in command for command in commands)
    for picture in re.findall(r"\]\((outputs/[^)]+)\)", section_text()):
        assert any(picture in command for command in commands), picture


@pytest.mark.parametrize("command, pasted", console_blocks(),
                         ids=[command[len("python3 code/main.py "):]
                              for command, _ in console_blocks()])
def test_readme_block_matches_what_the_command_prints_and_writes(command, pasted, tmp_path):
    printed, written = run_command(command, tmp_path)
    if pasted:
        starts = [i for i, line in enumerate(printed) if line == pasted[0]]
        assert any(printed[i:i + len(pasted)] == pasted for i in starts), (
            f"README's output of `{command}` is stale: rerun it and paste the output")
    for committed, fresh in written.items():
        assert (ROOT / committed).read_bytes() == fresh.read_bytes(), (
            f"{committed} is stale: regenerate it with `{command}` and commit it")
