"""A fresh clone, with nothing beside it, runs every command its docs show: no file of the
project names a path outside it, and every `$ ` line of every document is one the doc tests run
there (tests/test_readme.py the named blocks, tests/test_readme_commands.py the rest)."""

import re
import subprocess
import sys

from conftest import ROOT
from readme_blocks import BLOCK, DOCUMENTS, blocks, commands_of
from test_readme_commands import unnamed_commands

# The folder of notes beside the developers' checkouts, spelled in pieces so that neither this
# file nor its compiled form names it.
OUTSIDE = "/".join(["..", "shared"])


def project_files():
    skipped = {".git", ".venv", "__pycache__", ".pytest_cache"}
    for path in ROOT.rglob("*"):
        if path.is_file() and not skipped & set(path.relative_to(ROOT).parts):
            yield path


def test_no_file_of_the_project_names_a_folder_outside_it():
    naming = [str(path.relative_to(ROOT)) for path in project_files()
              if OUTSIDE.encode() in path.read_bytes()]
    assert not naming


def test_the_clone_has_nothing_beside_it(fresh_clone):
    assert [path.name for path in fresh_clone.parent.iterdir()] == ["servesim"]
    assert not (fresh_clone.parent / "shared").exists()


def test_every_dollar_line_of_every_document_is_run_by_a_doc_test():
    named = {command for document in DOCUMENTS
             for body in blocks(document.read_text(encoding="utf-8")).values()
             for command in commands_of(body)}
    run = named | set(unnamed_commands())
    shown = {line[2:] for document in DOCUMENTS
             for line in document.read_text(encoding="utf-8").splitlines()
             if line.startswith("$ ")}
    assert shown <= run, sorted(shown - run)


def test_a_shipped_trace_runs_by_its_short_name_in_the_clone(fresh_clone):
    result = subprocess.run([sys.executable, "code/main.py", "run", "--trace", "azure-conv",
                             "--num-prompts", "100"], cwd=fresh_clone, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "trace azure-conv (azure): 100 requests" in result.stdout


def test_named_blocks_are_fenced_as_the_doc_tests_read_them():
    """A `$ ` line in a fence the block pattern misses (```bash, say) would go unchecked."""
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        starts = re.findall(r"^<!-- ([\w-]+):start -->$", text, re.M)
        assert sorted(starts) == sorted(match["name"] for match in BLOCK.finditer(text)), document
