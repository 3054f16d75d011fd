"""README's reading map: the lesson's sections by their Korean titles, each mapped to code and a
command; and exercise 1's command drawing what caused the worst gap."""

import re

from readme_blocks import README, blocks

TEXT = README.read_text(encoding="utf-8")
# The lesson's sections in its order, titled as it prints them (copied from the lesson, which
# is not in this repository).
SECTIONS = ["가상 메모리 시스템으로서의 PagedAttention", "반복(iteration) 수준의 연속 배칭",
            "청크 단위 프리필은 TTFT 꼬리 지연을 보호합니다", "세 가지 기본 동작은 서로를 전제로 한다",
            "2026년 v0.18.0 주의점", "기억해 둘 숫자", "스케줄러는 이렇게 생겼습니다", "사용해보기",
            "산출물 만들기", "연습문제"]


def reading_map_rows() -> dict[str, str]:
    section = TEXT.split("## Reading alongside the lesson", 1)[1].split("\n## ", 1)[0]
    return {row.split("|")[1].strip(): row for row in section.splitlines()
            if row.startswith("| ") and not row.startswith("| lesson section")}


def test_every_section_of_the_lesson_is_mapped_to_code_and_a_command_in_its_order():
    rows = reading_map_rows()
    assert list(rows) == SECTIONS
    for title, row in rows.items():
        _, korean, english, code, command, _ = row.split("|")
        assert english.strip() and re.search(r"`code/[\w/]+\.py`", code), title
        assert "`python3 code/main.py" in command, title


def test_the_artifact_is_mapped_to_the_diagnosis_and_its_skill_file():
    row = reading_map_rows()["산출물 만들기"]
    assert "`code/commands/diagnose.py`" in row and "outputs/skill-vllm-scheduler-reader.md" in row
    assert "`python3 code/main.py diagnose" in row


def test_exercise_1_draws_the_long_prompt_that_caused_continuous_batchings_worst_itl():
    body = blocks(TEXT)["exercise-1"]
    window = body.split("\nCONTINUOUS: ", 1)[1]
    worst_step = int(re.search(r"ended by step (\d+)\)", window)[1])
    # The step that ended the gap, or (async scheduling reads a step's output one step later)
    # the one before it, computed a long prompt.
    rows = [line for line in window.splitlines()[2:]
            if line.split() and line.split()[0].isdigit()
            and worst_step - 1 <= int(line.split()[0]) <= worst_step]
    prompts = [int(cell.strip("P*")) for row in rows for cell in row.split("|")[1].split()
               if cell.startswith("P")]
    assert prompts and max(prompts) >= 6000  # the mixed workload's long documents: 6,000-7,800
