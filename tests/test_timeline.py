"""--timeline: one row per engine step, one cell per request; hand-computed tiny scenarios.

The clock is the linear one, so step times can be worked out by hand:
step ms = 1 + 0.01 x prompt tokens + 0.5 x decode tokens.
"""

import pytest

from config import ConfigError, EngineConfig
from forward_model import make_clock
from main import simulate
from modes import MODES
from request import Request
from commands.flags import parse_timeline_spec
from reports.timeline import MAX_REQUEST_COLUMNS, TimelineSpec, TimelineWindow, render_timeline
from workload import Workload

NUM_GPU_BLOCKS = 1000


def tiny_workload(*specs) -> Workload:
    """specs: (arrival_s, prompt_len, output_len), ids 0, 1, 2, ..."""
    def make_requests():
        return iter([Request(str(i), *spec) for i, spec in enumerate(specs)])
    return Workload("tiny", "tiny", {"name": "tiny"}, make_requests)


def watch(workload, mode_name, spec, **config_changes) -> TimelineWindow:
    config = EngineConfig(forward_model="linear", linear_step_ms=1.0,
                          linear_prefill_token_ms=0.01, linear_decode_token_ms=0.5,
                          async_scheduling=False, **config_changes)  # one step at a time
    window = TimelineWindow(spec)
    simulate(workload, MODES[mode_name], config, NUM_GPU_BLOCKS, make_clock(config), [window])
    return window


# Request 0 (10-token prompt, 6 tokens) decodes; request 1 (1,000-token prompt) arrives at 2 ms.
STALL = tiny_workload((0.0, 10, 6), (0.002, 1000, 2))


def test_a_whole_prompt_stalls_the_decode_beside_it_for_its_whole_step():
    window = watch(STALL, "continuous", TimelineSpec(4))
    # step 0: P10* (1.1 ms); step 1: d (1.5 ms, t = 2.6 ms); step 2: d + the whole prompt
    assert [row.cells for row in window.rows[:3]] == [
        [("0", "P10*")], [("0", "d")], [("0", "d"), ("1", "P1000*")]]
    assert window.rows[2].step_ms == pytest.approx(1 + 0.01 * 1000 + 0.5)  # request 0's ITL
    assert window.rows[2].max_itl_s == pytest.approx(0.0115)


def test_chunks_share_each_step_with_the_decodes():
    window = watch(STALL, "chunked", TimelineSpec(20), max_num_batched_tokens=100)
    chunks = [dict(row.cells)["1"] for row in window.rows if dict(row.cells).get("1", "d") != "d"]
    sizes = [int(chunk.strip("P*")) for chunk in chunks]
    assert sum(sizes) == 1000 and chunks[-1].endswith("*")
    for row in window.rows:
        cells = dict(row.cells)
        if "0" in cells and cells.get("1", "").startswith("P"):
            assert cells["0"] == "d" and int(cells["1"].strip("P*")) <= 99  # 1 token for "0"
    assert max(row.step_ms for row in window.rows) < 3.0  # no step near the 11.5 ms stall


def test_static_padding_shows_as_dots_after_a_member_finishes():
    workload = tiny_workload((0.0, 10, 2), (0.0, 20, 4))
    window = watch(workload, "static", TimelineSpec(10), max_model_len=2048)  # 7 reservations
    assert [row.cells for row in window.rows] == [
        [("0", "P20*"), ("1", "P20*")],   # both prompts padded to the longest
        [("0", "d"), ("1", "d")],
        [("0", "."), ("1", "d")],          # "0" is done but still computes
        [("0", "."), ("1", "d")]]


def test_start_window_is_the_first_n_steps():
    window = watch(STALL, "chunked", TimelineSpec(3), max_num_batched_tokens=100)
    assert [row.index for row in window.rows] == [0, 1, 2]
    assert window.num_steps_seen > 3  # it kept counting, drawing nothing more


def test_worst_itl_window_leads_into_the_longest_gap():
    window = watch(STALL, "continuous", parse_timeline_spec(4, "worst-itl"))
    # one row before the anchor (4 // 4), the step of the 11.5 ms gap, then two after
    assert [row.index for row in window.rows] == [1, 2, 3, 4]
    assert max(window.rows, key=lambda row: row.max_itl_s).index == 2


def test_request_window_starts_just_before_the_requests_first_step():
    window = watch(STALL, "chunked", parse_timeline_spec(8, "request:1"),
                   max_num_batched_tokens=100)
    first_step_of_1 = next(row for row in window.rows if "1" in dict(row.cells))
    assert window.rows[0].index == first_step_of_1.index - 2  # 8 // 4 rows of lead


def test_an_unknown_request_id_is_one_clear_error():
    window = watch(STALL, "chunked", parse_timeline_spec(4, "request:7"),
                   max_num_batched_tokens=100)
    with pytest.raises(ConfigError, match="request:7: CONTINUOUS\\+CHUNKED never scheduled"):
        render_timeline("CONTINUOUS+CHUNKED", window)


@pytest.mark.parametrize("num_steps, where", [(0, "start"), (4, "middle"), (4, "request:")])
def test_bad_timeline_flags_are_refused(num_steps, where):
    with pytest.raises(ConfigError):
        parse_timeline_spec(num_steps, where)


def test_rendered_timeline_fits_100_columns_and_says_what_it_left_out():
    many = tiny_workload(*[(0.0, 30, 3) for _ in range(MAX_REQUEST_COLUMNS + 4)])
    lines = render_timeline("CONTINUOUS", watch(many, "continuous", TimelineSpec(3)))
    assert all(len(line) <= 100 for line in lines)
    assert lines[-1].startswith("(4 more request(s) ran in these steps")
    assert lines[1].split("|")[1].split() == [str(i) for i in range(MAX_REQUEST_COLUMNS)]


def test_the_worst_itl_window_draws_the_prompt_that_made_the_step_slow_before_other_prompts():
    # Two requests decode; nine short prompts join them in step 1, and in step 2 a 1,000-token
    # prompt stalls all eleven decodes (16.5 ms). The row before it holds nine prompts that
    # appeared earlier: the long one must still be drawn, in the step it made slow.
    workload = tiny_workload((0.0, 10, 40), (0.0, 10, 40), *[(0.0011, 10, 40)] * 9,
                             (0.0013, 1000, 2))
    window = watch(workload, "continuous", parse_timeline_spec(6, "worst-itl"))
    lines = render_timeline("CONTINUOUS", window)
    assert lines[0].endswith("(16.5 ms, ended by step 2)")
    assert "11" in lines[1].split("|")[1].split()  # the long prompt's column
    assert "P1000*" in next(line for line in lines[2:] if line.split()[0] == "2")
