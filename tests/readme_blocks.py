"""The docs' pasted outputs, regenerated from the commands they show, so the docs cannot rot.

The docs are README.md and the skill file outputs/skill-vllm-scheduler-reader.md (DOCUMENTS). A
block in either looks like

    <!-- name:start -->
    ```
    $ command one
    $ command two
    output of the last command
    ```
    <!-- name:end -->

`python3 tests/readme_blocks.py` reruns every block's commands and rewrites the block (and the
charts they write under outputs/); the tests check that the docs and outputs/ already hold
exactly that. Commands run from the project root in a shell, with `python3` (anywhere in a
command line) meaning the interpreter running this file and `/tmp/` a private scratch folder.
They run as a learner runs them, without the invariant checker: the docs' long replays would
double the suite's time under it, and the checker has its own workloads, made to break the
engine (tests/test_fuzz.py, tests/test_invariants.py), besides every other test's.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKILL = ROOT / "outputs" / "skill-vllm-scheduler-reader.md"  # the lesson's deliverable
ENGINE_README = ROOT / "code" / "README.md"  # the engine and its clock, in depth
DOCUMENTS = (README, SKILL, ENGINE_README)
BLOCK = re.compile(r"<!-- (?P<name>[\w-]+):start -->\n```\n(?P<body>.*?)```\n<!-- (?P=name):end -->",
                   re.DOTALL)


def commands_of(body: str) -> list[str]:
    return [line[2:] for line in body.splitlines() if line.startswith("$ ")]


def written_files(commands: list[str]) -> list[str]:
    """The files under outputs/ that the commands write (the charts README shows)."""
    return sorted({path for c in commands for path in re.findall(r"outputs/[\w.-]+", c)})


def run_commands(commands: list[str], outputs_dir: Path) -> str:
    """Run the commands in order, writing outputs/ files into `outputs_dir`; return what the
    last one printed."""
    environment = {**os.environ, "SERVESIM_CHECK_INVARIANTS": ""}  # see the module docstring
    with tempfile.TemporaryDirectory() as scratch:
        output = ""
        for command in commands:
            shell_command = command.replace("/tmp/", scratch + "/")
            shell_command = shell_command.replace("outputs/", f"{outputs_dir}/")
            shell_command = re.sub(r"(^|(?<=[\s;(]))python3 ", f"{sys.executable} ", shell_command)
            result = subprocess.run(shell_command, shell=True, cwd=ROOT, env=environment,
                                    capture_output=True, text=True, check=True)
            output = result.stdout
    return output


def fresh_body(body: str, outputs_dir: Path = ROOT / "outputs") -> str:
    commands = commands_of(body)
    return "".join(f"$ {c}\n" for c in commands) + run_commands(commands, outputs_dir)


def blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def regenerate(text: str) -> str:
    def refresh(match):
        name = match["name"]
        return f"<!-- {name}:start -->\n```\n{fresh_body(match['body'])}```\n<!-- {name}:end -->"
    return BLOCK.sub(refresh, text)


if __name__ == "__main__":
    for document in DOCUMENTS:
        document.write_text(regenerate(document.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"rewrote {len(blocks(document.read_text(encoding='utf-8')))} blocks in "
              f"{document.relative_to(ROOT)}")
