"""Every command the docs (every README.md and the skill file) show runs as written in a fresh
clone: the `$ ` lines of their fenced blocks and every inline `python3 code/main.py ...` span,
shell loops included.

The named blocks (`<!-- name:start -->`) are run, and their output compared, by test_readme.py;
this test runs the rest, two at a time. Commands run from the root of a fresh copy of the project
(conftest.fresh_clone) in a shell, with `python3` meaning this interpreter and `/tmp/` and
`outputs/` a private scratch folder (so that a command writing a chart never touches the
committed ones).
"""

import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from readme_blocks import BLOCK, DOCUMENTS, README, commands_of

TEXT = README.read_text(encoding="utf-8")
DOCS_TEXT = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
FENCE = re.compile(r"```\n(?P<body>.*?)```", re.DOTALL)
INLINE = re.compile(r"`([^`\n]*python3 code/main\.py[^`\n]*)`")


def unnamed_fenced_commands(text: str) -> list[str]:
    outside_named_blocks = BLOCK.sub("", text)
    return [c for match in FENCE.finditer(outside_named_blocks) for c in commands_of(match["body"])]


def inline_commands(text: str) -> list[str]:
    return INLINE.findall(FENCE.sub("", text))


def run_as_written(command: str, cwd) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as scratch:
        shell_command = (command.replace("/tmp/", scratch + "/")
                         .replace("outputs/", scratch + "/")
                         .replace("python3 code/", f"{sys.executable} code/"))
        return subprocess.run(shell_command, shell=True, cwd=cwd, capture_output=True,
                              text=True, timeout=120)


def test_readme_shows_commands_inline_and_loops_among_them():
    commands = inline_commands(TEXT)
    assert "python3 code/main.py kv-waste" in commands
    assert any(command.startswith("for ") for command in commands_of(TEXT.replace("```", "")))


def unnamed_commands() -> list[str]:
    return list(dict.fromkeys(unnamed_fenced_commands(DOCS_TEXT) + inline_commands(DOCS_TEXT)))


def test_every_command_the_docs_show_runs_as_written_in_a_fresh_clone(fresh_clone):
    commands = unnamed_commands()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda command: run_as_written(command, fresh_clone), commands))
    failed = [(command, result.returncode, result.stderr.strip()[-300:])
              for command, result in zip(commands, results)
              if result.returncode != 0 or not result.stdout.strip()]
    assert not failed, failed
