"""STATIC batching, step by step, against tables worked out by hand.

Every step here costs exactly 1 ms (a constant clock), so times can be read off by counting. A row
is one engine step: (start in ms, tokens scheduled per request, padding tokens, finished ids).
"""

import pytest

from config import EngineConfig
from conftest import EveryRequest, make_workload
from main import simulate
from modes import MODES

STEP_S = 0.001


class OneMillisecondClock:
    """Every step takes 1 ms, whatever it computes."""

    def step_time_s(self, batch) -> float:
        return STEP_S

    def decode_step_time_s(self, num_seqs, num_context_tokens) -> float:
        return STEP_S


def static_rows(rows, max_num_seqs=4, batching_window_ms=10.0, max_model_len=100,
                num_reservations=8):
    """Serve (arrival_s, prompt_len, output_len) rows in STATIC; one table row per step."""
    config = EngineConfig(max_num_seqs=max_num_seqs, batching_window_ms=batching_window_ms,
                          max_model_len=max_model_len, block_size=1)
    steps = []
    simulate(make_workload(rows), MODES["static"], config, num_reservations * max_model_len,
             OneMillisecondClock(), observers=[steps.append])
    return [(round(step.start_s * 1000, 6),
             {s.request.request_id: s.num_new_tokens for s in step.batch.scheduled},
             step.batch.num_padding_tokens, [r.request_id for r in step.result.finished])
            for step in steps]


def test_a_batch_forms_when_the_oldest_request_has_waited_the_batching_window():
    # 0 waits alone; 1 joins it at 2 ms; at 10 ms 0's window runs out and the batch of two forms,
    # its prompts padded to the longest (6). 2 arrives at 20 ms and waits out its own window.
    rows = static_rows([(0.0, 4, 2), (0.002, 6, 1), (0.020, 2, 1)])
    assert rows == [
        (10.0, {"0": 6, "1": 6}, 2, ["1"]),  # both sample their first token; 1 wants no more
        (11.0, {"0": 1, "1": 1}, 1, ["0"]),  # 1 is done but computes padding beside 0
        (30.0, {"2": 2}, 0, ["2"]),
    ]


def test_a_full_batch_does_not_wait_for_the_window():
    rows = static_rows([(0.0, 3, 1), (0.0, 3, 1)], max_num_seqs=2)
    assert rows[0][0] == 0.0


def test_contiguous_reservations_cap_the_batch_below_max_num_seqs():
    # The pool holds two max_model_len reservations, so a batch has at most two members.
    rows = static_rows([(0.0, 5, 1)] * 4, max_num_seqs=4, num_reservations=2)
    assert [scheduled for _, scheduled, _, _ in rows] == [{"0": 5, "1": 5}, {"2": 5, "3": 5}]


def test_nobody_joins_a_running_batch_until_it_drains():
    # 2 arrives while the batch of 0 and 1 decodes; it waits for the drain, then for its window.
    rows = static_rows([(0.0, 4, 3), (0.0, 4, 3), (0.0015, 4, 1)], max_num_seqs=2)
    assert rows == [
        (0.0, {"0": 4, "1": 4}, 0, []),
        (1.0, {"0": 1, "1": 1}, 0, []),
        (2.0, {"0": 1, "1": 1}, 0, ["0", "1"]),
        (11.5, {"2": 4}, 0, ["2"]),          # drained at 3 ms; 2's window ends at 1.5 + 10 ms
    ]


def test_the_batch_decodes_until_its_longest_output_is_done():
    rows = static_rows([(0.0, 2, 1), (0.0, 2, 3)], max_num_seqs=2)
    assert [(padding, finished) for _, _, padding, finished in rows] == [
        (0, ["0"]), (1, []), (1, ["1"])]


def test_an_output_is_cut_where_the_sequence_reaches_max_model_len():
    # prompt 8 + 2 outputs = max_model_len 10, although 5 were asked for.
    rows = static_rows([(0.0, 8, 5)], max_num_seqs=1, max_model_len=10)
    assert [finished for _, _, _, finished in rows] == [[], ["0"]]


@pytest.mark.parametrize("mode", ["naive", "static"])
def test_a_prompt_of_max_model_len_is_rejected_on_arrival(mode):
    config = EngineConfig(max_model_len=10, block_size=1)
    recorder = simulate(make_workload([(0.0, 10, 1), (0.0, 4, 1)]), MODES[mode], config, 80,
                        OneMillisecondClock())
    assert [r.request_id for r in recorder.rejections()] == ["0"]
    assert [r.index for r in recorder.completed()] == [1]


@pytest.mark.parametrize("observers", [[], [EveryRequest()]], ids=["bulk", "one-by-one"])
def test_static_loss_is_split_into_prompt_padding_decode_padding_idle_seats_and_queueing(observers):
    # At 10 ms the batch of 0 (prompt 4, 3 outputs) and 1 (prompt 6, 1 output) forms: prompts
    # padded to 6, 2 tokens of prompt padding. Two decode steps follow in which 1, finished,
    # computes padding: 2 tokens of decode padding. 2 arrives at 10.5 ms, while the batch runs,
    # and waits beside two empty seats (min(4 seats - 2 members, 1 waiting) = 1 it could take) in
    # both decode steps; the batch drains at 13 ms, 2's window ends at 20.5 ms, its prompt of 3
    # runs alone.
    config = EngineConfig(max_num_seqs=4, batching_window_ms=10.0, max_model_len=100,
                          block_size=1)
    recorder = simulate(make_workload([(0.0, 4, 3), (0.002, 6, 1), (0.0105, 3, 1)]),
                        MODES["static"], config, 800, OneMillisecondClock(), observers)
    summary = recorder.summary()
    computed = 12 + 2 + 2 + 3
    assert summary["prefill_padding_pct"] == pytest.approx(100 * 2 / computed)
    assert summary["decode_padding_pct"] == pytest.approx(100 * 2 / computed)
    assert summary["padding_pct"] == pytest.approx(100 * 4 / computed)
    assert summary["mean_idle_batch_slots"] == pytest.approx((1 + 1) / 4)  # seat-ms / busy ms
    assert summary["mean_queue_ms"] == pytest.approx((10 + 8 + 10) / 3)
    assert summary["prompt_time_pct"] == pytest.approx(100 * 2 / 4)  # 2 of 4 steps
    assert summary["decode_only_waiting_pct"] == pytest.approx(100 * 2 / 4)  # 2 decoded beside it
    assert summary["num_recomputed_tokens"] == 0 and summary["decodes_beside_prompts_pct"] == 0
