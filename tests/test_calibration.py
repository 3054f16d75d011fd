"""The clock against published measurements: within the issue's goals, and each row reproducible.

The measurements and their sources live in code/commands/calibration.py; these tests run them.
"""

import pytest

from commands import calibration
from commands.cli import build_parser
from commands.flags import config_from_args, modes_from_args
from commands.workload_flags import workload_from_args
from config import Knobs
from main import simulate
from modes import MODES


@pytest.fixture(scope="module")
def published_md():
    return calibration.compare_group(calibration.PUBLISHED_MD, simulate)


def test_the_16_rows_of_published_md_are_all_there(published_md):
    assert [c.measurement.id for c in published_md] == (
        [f"L{i}" for i in range(1, 6)] + [f"N{i}" for i in range(1, 6)]
        + [f"T{i}" for i in range(1, 7)])


def test_published_md_median_and_worst_error_are_within_the_goal(published_md):
    assert calibration.median_abs_ln(published_md) <= 0.15
    assert calibration.worst(published_md).abs_ln_ratio <= 0.40
    assert calibration.meets_goal(calibration.PUBLISHED_MD, published_md)


def test_tensorrt_llm_offline_throughput_is_within_35_percent():
    comparisons = calibration.compare_group(calibration.THROUGHPUT, simulate)
    assert len(comparisons) == 3
    for comparison in comparisons:
        assert 0.65 <= comparison.ratio <= 1.35, comparison.measurement.id


def test_kv_capacity_is_within_10_percent_of_what_vllm_logged():
    [kv] = calibration.compare_group(calibration.KV_CAPACITY, simulate)
    assert 0.90 <= kv.ratio <= 1.10


def test_a_group_outside_its_band_is_reported_as_not_meeting_its_goal():
    measurement = calibration.KV_CAPACITY.measurements[0]
    off = [calibration.Comparison(measurement, measurement.published * 1.2)]
    assert not calibration.meets_goal(calibration.KV_CAPACITY, off)
    assert "NOT met" in "\n".join(calibration.report_lines([(calibration.KV_CAPACITY, off)]))


@pytest.mark.parametrize("measurement", [m for group in calibration.GROUPS
                                         for m in group.measurements if m.workload],
                         ids=lambda m: m.id)
def test_each_rows_run_flags_build_the_same_setup(measurement):
    args = build_parser(Knobs()).parse_args(["run", *measurement.flags().split()])
    config, _ = config_from_args(args, Knobs())
    assert config == measurement.config()
    assert modes_from_args(args, ["chunked"])[0] is MODES[measurement.mode]
    from_flags, from_data = workload_from_args(args, config), measurement.make_workload()
    assert (from_flags.description, from_flags.params, from_flags.max_concurrency) == (
        from_data.description, from_data.params, from_data.max_concurrency)


def test_json_names_each_rows_figures_and_the_run_flags_that_reproduce_it():
    measurement = calibration.PUBLISHED_MD.measurements[0]
    comparisons = [calibration.Comparison(measurement, 2 * measurement.published)]
    [group] = calibration.to_json([(calibration.PUBLISHED_MD, comparisons)])["groups"]
    [row] = group["rows"]
    assert row["ratio"] == 2.0 and row["run_flags"] == measurement.flags()
    assert group["worst_abs_ln_ratio"] == pytest.approx(0.693, abs=0.001)
    assert group["goal_met"] is False
