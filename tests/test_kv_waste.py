"""kv-waste: the closed forms by hand, and the over-time figures against the engine's own KV
accounting."""

import json

import pytest

from commands.kv_waste import Population, ReservationAccounting, policies, reserve_power_of_two
from config import EngineConfig
from conftest import EveryRequest, make_workload, servesim_here
from forward_model import make_clock
from main import simulate
from modes import MODES


@pytest.fixture(scope="module")
def default_report():
    """`kv-waste --format json` on exercise 4's population (about a second)."""
    import contextlib
    import io

    import main
    from commands import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["kv-waste", "--format", "json"], main.simulate, main.knobs()) == 0
    return json.loads(out.getvalue())


def test_power_of_two_rounds_the_output_up_as_the_paper_does():
    assert reserve_power_of_two(100, 25, 8192) == 100 + 32   # the paper's example
    assert reserve_power_of_two(100, 32, 8192) == 100 + 32
    assert reserve_power_of_two(100, 1, 8192) == 101
    assert reserve_power_of_two(7000, 1500, 8192) == 8192    # never past max_model_len


def test_closed_forms_on_three_requests_worked_by_hand():
    # (prompt, outputs): they cache prompt + outputs - 1 tokens: 29, 16, 100.
    population = Population([(10, 20), (1, 16), (50, 51)], max_model_len=128, num_rejected=0)
    used = 29 + 16 + 100
    by_name = {policy.name: policy for policy in policies(block_size=16)}
    assert population.used_slots() == used
    assert population.waste_pct(by_name["contiguous"]) == pytest.approx(100 * (1 - used / 384))
    assert population.waste_pct(by_name["pow2"]) == pytest.approx(
        100 * (1 - used / ((10 + 32) + (1 + 16) + (50 + 64))))
    assert population.waste_pct(by_name["oracle"]) == 0.0
    # paged: the unfilled tail of each last block: 32 - 29, 16 - 16, 112 - 100
    assert population.waste_pct(by_name["paged"]) == pytest.approx(100 * (3 + 0 + 12) / (32 + 16 + 112))
    assert population.mean_blocks(16) == (2 + 1 + 7) / 3


def accounted(rows, mode, config, num_blocks):
    accounting = ReservationAccounting(policies(config.block_size), config.max_model_len)
    recorder = simulate(make_workload(rows), MODES[mode], config, num_blocks, make_clock(config),
                        [accounting])
    return accounting.waste_pct(), recorder.summary()


ROWS = [(0.0, 300, 40), (0.0, 90, 200), (0.05, 700, 12), (0.2, 40, 300), (0.2, 1000, 5)]


def test_the_contiguous_figure_over_time_is_naives_own_kv_waste():
    # NAIVE reserves max_model_len per request, as the contiguous policy does, through its own
    # allocator (kv_cache.ContiguousKVCache): the two accounts must agree.
    config = EngineConfig(max_model_len=2048)
    waste, summary = accounted(ROWS, "naive", config, 400)
    assert waste["contiguous"] == pytest.approx(summary["kv_waste_pct"], rel=1e-12)


@pytest.mark.parametrize("observers_see_every_request", [False, True])
def test_the_paged_figure_over_time_is_the_paged_engines_own_kv_waste(observers_see_every_request):
    config = EngineConfig(max_model_len=2048, default_chunked_budget=256)
    accounting = ReservationAccounting(policies(16), 2048)
    observers = [accounting] + ([EveryRequest()] if observers_see_every_request else [])
    summary = simulate(make_workload(ROWS), MODES["chunked"], config, 400, make_clock(config),
                       observers).summary()
    assert accounting.waste_pct()["paged"] == pytest.approx(summary["kv_waste_pct"], rel=1e-12)


def test_a_true_length_reservation_still_wastes_while_its_tokens_arrive():
    # One request, prompt 4, 3 outputs, linear clock 1 ms a step, it caches 4, 5, 6 tokens while
    # steps 1, 2, 3 run (the KV the step computes counts as held): the oracle reserves 6 all along.
    config = EngineConfig(max_model_len=64, block_size=4, forward_model="linear",
                          linear_step_ms=1.0, linear_prefill_token_ms=0.0,
                          linear_decode_token_ms=0.0)
    waste, _ = accounted([(0.0, 4, 3)], "continuous", config, 16)
    assert waste["oracle"] == pytest.approx(100 * (1 - (4 + 5 + 6) / (3 * 6)))
    assert waste["contiguous"] == pytest.approx(100 * (1 - (4 + 5 + 6) / (3 * 64)))


def test_the_default_population_is_exercise_fours_and_names_the_json_keys(default_report):
    assert default_report["num_requests"] == 1000
    assert default_report["workload"]["output_mean"] == 1500
    assert default_report["workload"]["output_std"] == 600
    for key in ("contiguous_waste_pct", "paged_waste_pct", "oracle_waste_pct", "pow2_waste_pct"):
        assert key in default_report
    assert default_report["oracle_waste_pct"] == 0.0
    assert default_report["paged_waste_pct"] < 1 < 70 < default_report["contiguous_waste_pct"]
    over_time = {row["policy"]: row["over_time_waste_pct"] for row in default_report["policies"]}
    assert over_time["paged"] == pytest.approx(default_report["simulation"]["kv_waste_pct"])
    assert over_time["oracle"] > 0 and over_time["contiguous"] > default_report["contiguous_waste_pct"]


def test_block_size_32_about_doubles_block_size_16s_paged_waste(default_report):
    waste = {row["block_size"]: row["paged_waste_pct"] for row in default_report["block_sizes"]}
    assert [row["block_size"] for row in default_report["block_sizes"]] == [1, 8, 16, 32, 128]
    assert waste[1] == 0.0
    assert 1.8 < waste[32] / waste[16] < 2.3
    entries = [row["mean_blocks_per_request"] for row in default_report["block_sizes"]]
    assert entries == sorted(entries, reverse=True)  # less waste costs more block-table entries


def test_any_dataset_or_trace_can_be_the_population(capsys):
    code, out, err = servesim_here(capsys, "kv-waste", "--dataset-name", "random",
                                   "--num-prompts", "20", "--random-input-len", "100",
                                   "--random-output-len", "50", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["num_requests"] == 20 and report["mean_tokens_cached"] == 149
    assert report["paged_waste_pct"] == pytest.approx(100 * (160 - 149) / 160)

