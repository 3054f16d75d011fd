"""Every document (README.md, the folder READMEs, the skill file) shows what the commands next to
it print today, run in a fresh clone, and the charts they write; the top README stays a short
walk through the lesson, in the lesson's order."""

import re
from pathlib import Path

import pytest

from readme_blocks import (DOCUMENTS, README, ROOT, SKILL, all_blocks, blocks, commands_of,
                           fresh_body, in_parallel, written_files)

TEXT = README.read_text(encoding="utf-8")
BLOCKS = blocks(TEXT)
# Every pasted block of every document, as (document's path, block's name).
ALL_BLOCKS = {(str(document.relative_to(ROOT)), name): body for document in DOCUMENTS
              for name, body in blocks(document.read_text(encoding="utf-8")).items()}
# Blocks whose command is costly and which another test computes anyway, checked there instead.
CHECKED_ELSEWHERE = {"lesson-check": "tests/test_lesson_check.py"}
MAX_README_LINES, READING_MAP_BY_LINE = 600, 250


def test_the_docs_show_the_default_table_a_worked_step_a_run_a_timeline_and_a_sweep():
    assert "default-output" in BLOCKS
    shown = all_blocks()
    assert {"worked-example", "run-block", "timeline", "sweep"} <= set(shown)
    assert any("--timeline" in c and "continuous,chunked" in c
               for c in commands_of(shown["timeline"]))


def test_block_names_are_unique_across_the_documents():
    names = [name for _, name in ALL_BLOCKS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_chart_a_document_shows_is_made_by_a_command_in_it(document):
    text = document.read_text(encoding="utf-8")
    made = {path for body in blocks(text).values() for path in written_files(commands_of(body))}
    images = {(document.parent / image).resolve().relative_to(ROOT).as_posix()
              for image in re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text)}
    assert images <= made


CHECKED_HERE = sorted(key for key in ALL_BLOCKS if key[1] not in CHECKED_ELSEWHERE)


@pytest.fixture(scope="module")
def fresh_blocks(tmp_path_factory, fresh_clone) -> dict:
    """Every block checked here, run in the fresh clone (all at once, a thread per core), with
    the folder its outputs/ files went to."""
    folders = {key: tmp_path_factory.mktemp("outputs") for key in CHECKED_HERE}
    bodies = in_parallel(lambda key: fresh_body(ALL_BLOCKS[key], folders[key], fresh_clone),
                         {key: key for key in CHECKED_HERE})
    return {key: (bodies[key], folders[key]) for key in CHECKED_HERE}


@pytest.mark.parametrize("document, name", CHECKED_HERE)
def test_pasted_output_and_charts_are_current_in_a_fresh_clone(document, name, fresh_blocks):
    body = ALL_BLOCKS[document, name]
    fresh, folder = fresh_blocks[document, name]
    assert body == fresh, f"{document} block {name!r} is stale: run python3 tests/readme_blocks.py"
    for path in written_files(commands_of(body)):
        assert (ROOT / path).read_bytes() == (folder / path.split("/", 1)[1]).read_bytes(), (
            f"{path} is stale: run python3 tests/readme_blocks.py and commit it")


def test_readme_gives_one_test_command_and_ci_runs_exactly_it():
    fenced = [line for body in re.findall(r"```\n(.*?)```", TEXT, re.DOTALL)
              for line in body.splitlines() if "-m pytest" in line]
    assert len(fenced) == 1, fenced
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert fenced[0] in ci_lines


def test_readme_is_short_and_reads_the_lesson_early():
    lines = TEXT.splitlines()
    assert len(lines) <= MAX_README_LINES
    headings = [line for line in lines if line.startswith("## ")]
    assert lines.index("## Reading alongside the lesson") < READING_MAP_BY_LINE
    assert headings[:3] == ["## Set up: two commands", "## Reading the default table",
                            "## Reading alongside the lesson"]


def test_the_reading_section_answers_4_objectives_5_exercises_and_the_quiz_with_commands():
    section = TEXT.split("## Reading alongside the lesson", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^\*\*(Objective \d|Exercise \d|\d)\. ", section, flags=re.M)
    answered = {label: body for label, body in zip(parts[1::2], parts[2::2])}
    assert [label for label in answered if label.startswith("Objective")] == [
        f"Objective {n}" for n in range(1, 5)]
    assert [label for label in answered if label.startswith("Exercise")] == [
        f"Exercise {n}" for n in range(1, 6)]
    quiz = [label for label in answered if label.isdigit()]
    assert "### Quiz" in section and quiz == [str(n) for n in range(1, len(quiz) + 1)]
    assert {"4", "6"} <= set(quiz)  # what the scheduler optimizes; --gpu-memory-utilization
    for label, body in answered.items():  # each with a pasted block of real output
        assert re.search(r"<!-- [\w-]+:start -->\n```\n\$ python3 code/main\.py", body) or \
            re.search(r"<!-- [\w-]+:start -->\n```\n\$ for ", body), label


def test_readme_states_no_test_count_or_time_that_would_rot():
    tests_section = TEXT.split("## Tests\n", 1)[1]
    assert not re.search(r"\d+ passed|\d+(\.\d+)?\s?s\b|minute", tests_section)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_file_the_docs_name_is_in_the_repository(document):
    text = document.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w./])((?:code|tests|outputs|\.ci)/[\w./-]*\w)", text))
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{document.name} names files that are not in the repository: {missing}"


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    titles = re.findall(r"^#{1,6} (.*)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_link_between_the_docs_lands_on_a_file_and_heading(document):
    links = re.findall(r"\]\(([^)\s]+)\)", document.read_text(encoding="utf-8"))
    broken = []
    for link in links:
        if "://" in link:
            continue
        target, _, anchor = link.partition("#")
        path = (document.parent / target).resolve() if target else document
        if not path.exists() or (anchor and anchor not in heading_anchors(path)):
            broken.append(link)
    assert not broken, f"{document.relative_to(ROOT)}: {broken}"


def test_the_skill_file_shows_servesim_diagnosing_with_and_without_observed_metrics():
    commands = [c for body in blocks(SKILL.read_text(encoding="utf-8")).values()
                for c in commands_of(body)]
    diagnoses = [c for c in commands if "python3 code/main.py diagnose" in c]
    assert any("--observed" in c for c in diagnoses)
    assert any("--observed" not in c for c in diagnoses)
