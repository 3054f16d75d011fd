"""The outputs pasted in README.md are what the commands next to them print today."""

import pytest

from readme_blocks import README, ROOT, blocks, fresh_body

BLOCKS = blocks(README.read_text(encoding="utf-8"))


def test_readme_has_the_default_table_and_the_worked_example():
    assert {"default-output", "worked-example"} <= set(BLOCKS)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_pasted_output_is_current(name):
    if "../shared/traces/" in BLOCKS[name] and not (ROOT.parent / "shared" / "traces").is_dir():
        pytest.skip("the shared traces are not next to this checkout")
    assert BLOCKS[name] == fresh_body(BLOCKS[name]), (
        f"README block {name!r} is stale: run python3 tests/readme_blocks.py")
