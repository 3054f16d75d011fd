"""README.md and the skill file show what the commands next to them print today, and the
charts they write."""

import re

import pytest

from readme_blocks import (DOCUMENTS, README, ROOT, SKILL, blocks, commands_of, fresh_body,
                           written_files)

TEXT = README.read_text(encoding="utf-8")
BLOCKS = blocks(TEXT)
# Every pasted block of every document, as (document's path, block's name): two are README.md.
ALL_BLOCKS = {(str(document.relative_to(ROOT)), name): body for document in DOCUMENTS
              for name, body in blocks(document.read_text(encoding="utf-8")).items()}
# Blocks whose command is costly and which another test computes anyway, checked there instead.
CHECKED_ELSEWHERE = {"lesson-check": "tests/test_lesson_check.py"}


def test_readme_shows_the_default_table_a_worked_step_a_run_a_timeline_and_a_sweep():
    assert {"default-output", "worked-example", "run-block", "timeline", "sweep"} <= set(BLOCKS)
    assert any("--timeline" in c and "continuous,chunked" in c for c in commands_of(BLOCKS["timeline"]))


def test_every_chart_readme_shows_is_made_by_a_command_in_it():
    made = {path for body in BLOCKS.values() for path in written_files(commands_of(body))}
    assert set(re.findall(r"!\[[^\]]*\]\((outputs/[^)]+)\)", TEXT)) <= made  # the images


@pytest.mark.parametrize("document, name", sorted(
    key for key in ALL_BLOCKS if key[1] not in CHECKED_ELSEWHERE))
def test_pasted_output_and_charts_are_current(document, name, tmp_path):
    body = ALL_BLOCKS[document, name]
    if "../shared/traces/" in body and not (ROOT.parent / "shared" / "traces").is_dir():
        pytest.skip("the shared traces are not next to this checkout")
    assert body == fresh_body(body, tmp_path), (
        f"{document} block {name!r} is stale: run python3 tests/readme_blocks.py")
    for path in written_files(commands_of(body)):
        assert (ROOT / path).read_bytes() == (tmp_path / path.split("/", 1)[1]).read_bytes(), (
            f"{path} is stale: run python3 tests/readme_blocks.py and commit it")


def test_ci_runs_exactly_the_test_command_readme_gives():
    command = re.search(r"## Tests\n.*?```\n(?P<command>[^\n]+)\n```", TEXT, re.DOTALL)["command"]
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in ci_lines


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda document: document.name)
def test_every_file_the_docs_name_is_in_the_repository(document):
    text = document.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w./])((?:code|tests|outputs|\.ci)/[\w./-]*\w)", text))
    assert "code/main.py" in named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{document.name} names files that are not in the repository: {missing}"


def test_the_skill_file_shows_servesim_diagnosing_with_and_without_observed_metrics():
    commands = [c for body in blocks(SKILL.read_text(encoding="utf-8")).values()
                for c in commands_of(body)]
    diagnoses = [c for c in commands if "python3 code/main.py diagnose" in c]
    assert any("--observed" in c for c in diagnoses)
    assert any("--observed" not in c for c in diagnoses)
