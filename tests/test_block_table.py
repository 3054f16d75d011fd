"""run --block-table: one request's logical -> physical blocks, step by step, worked by hand."""

import pytest

from config import EngineConfig
from conftest import make_workload, servesim_here
from forward_model import make_clock
from main import simulate
from modes import MODES
from reports.block_table import BlockTableWatch, render_block_table, table_text


def watched(rows, request_id, num_blocks=8, block_size=4):
    config = EngineConfig(block_size=block_size, max_model_len=32, forward_model="linear",
                          async_scheduling=False)  # the lesson's one step at a time
    watch = BlockTableWatch(request_id, block_size)
    simulate(make_workload(rows), MODES["continuous"], config, num_blocks, make_clock(config),
             [watch])
    return watch


def test_a_request_takes_blocks_from_the_free_list_returns_them_and_another_reuses_them():
    # 8 blocks of 4 tokens, ids 1..8 (vLLM keeps block 0 as its null block). Step 0: A (prompt
    # 6) takes [1, 2], B (prompt 5) [3, 4]. A's third token ends it in step 2, both its blocks
    # full: they go to the back of the free queue, tail first ([2, 1]). B's token 8 needs its
    # third block in step 4: 5, never used before. B ends with 10 tokens: its full blocks go to
    # the back ([2, 1, 4, 3]), its half-full last one to the front ([5]). C (prompt 20, five
    # blocks) arrives after both and takes the front, the never-used 6, 7, 8, then the least
    # recently freed full block: [5, 6, 7, 8, 2], one of them A's.
    watch = watched([(0.0, 6, 3), (0.0, 5, 6), (1.0, 20, 2)], "0")
    assert [(e.step, e.what, e.table, e.others_took, e.returned) for e in watch.events] == [
        (0, "P6*: takes 2 blocks", [1, 2], {"1": [3, 4]}, []),
        (2, "finished: returns 2 blocks", [], {}, [1, 2])]
    assert watch.reuser_id == "2"
    first = watch.reuser_events[0]
    assert (first.what, first.table, first.reused) == ("P20*: takes 5 blocks", [5, 6, 7, 8, 2],
                                                       [2])


def test_a_decode_that_crosses_into_a_new_block_is_drawn_with_the_token_that_needed_it():
    watch = watched([(0.0, 6, 3), (0.0, 5, 6), (1.0, 20, 2)], "1")
    crossing = next(e for e in watch.events if e.what.startswith("decode"))
    assert (crossing.step, crossing.what, crossing.table) == (4, "decode: token 8 needs block 2",
                                                              [3, 4, 5])


def test_the_drawing_says_when_no_block_came_back_into_use():
    watch = watched([(0.0, 6, 3)], "0")
    lines = render_block_table("CONTINUOUS", watch, 8)
    assert lines[-2].startswith("No request was handed one of request 0's blocks again")
    assert all(len(line) <= 100 for line in lines)


def test_long_tables_show_runs_of_consecutive_blocks():
    assert table_text([5, 6, 7, 12]) == "[5, 6, 7, 12]"
    assert table_text(list(range(5, 41)) + [52]) == "[5..40, 52]"


@pytest.mark.parametrize("argv, message", [
    (["--mode", "static", "--block-table", "0"], "STATIC has none"),
    (["--block-table", "0", "--format", "json"], "draws text"),
    (["--block-table", "nobody", "--num-prompts", "2"], "never scheduled a request with that id"),
])
def test_block_table_misuse_is_one_clear_line(capsys, argv, message):
    code, out, err = servesim_here(capsys, "run", *argv)
    assert code == 2 and out == "" and message in err and len(err.splitlines()) == 1
