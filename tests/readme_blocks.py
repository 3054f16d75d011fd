"""The docs' pasted outputs, regenerated from the commands they show, so the docs cannot rot.

The docs are every README.md of the repository (the top one and those beside the code they
describe) and the skill file outputs/skill-vllm-scheduler-reader.md (DOCUMENTS). A block in any
of them looks like

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
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKILL = ROOT / "outputs" / "skill-vllm-scheduler-reader.md"  # the lesson's deliverable


def readmes() -> list[Path]:
    """Every README.md of the project, the top one first (none under a hidden folder such as
    .git, .venv or a tool's cache, nor under tests/data, whose README describes recorded data,
    not commands)."""
    found = [path for path in ROOT.rglob("README.md")
             if not any(part.startswith(".") or part == "data"
                        for part in path.relative_to(ROOT).parts[:-1])]
    return sorted(found, key=lambda path: (path != README, str(path)))


DOCUMENTS = (*readmes(), SKILL)
BLOCK = re.compile(r"<!-- (?P<name>[\w-]+):start -->\n```\n(?P<body>.*?)```\n<!-- (?P=name):end -->",
                   re.DOTALL)


def commands_of(body: str) -> list[str]:
    return [line[2:] for line in body.splitlines() if line.startswith("$ ")]


def written_files(commands: list[str]) -> list[str]:
    """The files under outputs/ that the commands write (the charts README shows)."""
    return sorted({path for c in commands for path in re.findall(r"outputs/[\w.-]+", c)})


def run_commands(commands: list[str], outputs_dir: Path, cwd: Path = ROOT) -> str:
    """Run the commands in order from `cwd` (the project, or a fresh copy of it), writing
    outputs/ files into `outputs_dir`; return what the last one printed."""
    environment = {**os.environ, "SERVESIM_CHECK_INVARIANTS": ""}  # see the module docstring
    with tempfile.TemporaryDirectory() as scratch:
        output = ""
        for command in commands:
            shell_command = command.replace("/tmp/", scratch + "/")
            shell_command = shell_command.replace("outputs/", f"{outputs_dir}/")
            shell_command = re.sub(r"(^|(?<=[\s;(]))python3 ", f"{sys.executable} ", shell_command)
            result = subprocess.run(shell_command, shell=True, cwd=cwd, env=environment,
                                    capture_output=True, text=True, check=True)
            output = result.stdout
    return output


def fresh_body(body: str, outputs_dir: Path = ROOT / "outputs", cwd: Path = ROOT) -> str:
    commands = commands_of(body)
    return "".join(f"$ {c}\n" for c in commands) + run_commands(commands, outputs_dir, cwd)


def copy_as_a_fresh_clone(destination: Path) -> Path:
    """The project's files copied into `destination`/servesim, with nothing beside them (no
    folder of notes, no virtual environment, no caches): where a learner's clone would be."""
    clone = destination / "servesim"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", ".pytest_cache", "*.pyc"))
    return clone


def blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def regenerate(text: str, fresh: dict[str, str]) -> str:
    """`text` with each block's body replaced by its fresh one, by name."""
    def refresh(match):
        name = match["name"]
        return f"<!-- {name}:start -->\n```\n{fresh[name]}```\n<!-- {name}:end -->"
    return BLOCK.sub(refresh, text)


def in_parallel(run, items: dict) -> dict:
    """run(item) for each item, by key, a thread per core: a block's commands are processes
    of their own, each with its own /tmp/ folder, so blocks do not wait for one another."""
    keys = list(items)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip(keys, pool.map(run, [items[key] for key in keys])))


def all_blocks() -> dict[str, str]:
    """Every pasted block of every document, by name (names are unique across the documents)."""
    return {name: body for document in DOCUMENTS
            for name, body in blocks(document.read_text(encoding="utf-8")).items()}


if __name__ == "__main__":
    fresh = in_parallel(fresh_body, all_blocks())  # every document, in one command
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        document.write_text(regenerate(text, fresh), encoding="utf-8")
        print(f"rewrote {len(blocks(text))} blocks in {document.relative_to(ROOT)}")
