"""The clock against published measurements: within the issue's goals, and each row reproducible.

The measurements and their sources live in code/commands/calibration.py; these tests run them.
"""

import pytest

from commands import calibration, calibration_rows
from commands.cli import build_parser
from commands.flags import config_from_args, modes_from_args
from commands.workload_flags import workload_from_args
from config import ConfigError, Knobs
from main import simulate
from modes import MODES


@pytest.fixture(scope="module")
def published_md():
    return calibration.compare_group(calibration_rows.PUBLISHED_MD, simulate)


def test_the_16_rows_of_published_md_are_all_there(published_md):
    assert [c.measurement.id for c in published_md] == (
        [f"L{i}" for i in range(1, 6)] + [f"N{i}" for i in range(1, 6)]
        + [f"T{i}" for i in range(1, 7)])


def test_published_md_median_and_worst_error_are_within_the_goal(published_md):
    assert calibration.median_abs_ln(published_md) <= 0.10
    assert calibration.worst(published_md).abs_ln_ratio <= 0.25
    assert calibration.meets_goal(calibration_rows.PUBLISHED_MD, published_md)


def test_each_vllm_row_replays_under_the_version_it_ran():
    for measurement in calibration_rows.PUBLISHED_MD.measurements:
        config = measurement.config()
        if measurement.ran_on.startswith("vLLM 0.6"):
            assert (config.vllm_version, config.async_scheduling) == ("0.6", False)
        else:  # TensorRT-LLM and NIM: the C++ runtime, modelled as V1's overlapped CPU work
            assert config.vllm_version == "0.30.0" and config.async_scheduling


def test_rows_are_grouped_by_vendor_and_engine_generation(published_md, kept_aside):
    families = list(calibration.by_family(published_md + kept_aside))
    assert "NVIDIA / vLLM V0" in families and "AMD / vLLM V0" in families
    order = [calibration.family(c.measurement) for c in calibration.ordered(kept_aside)]
    assert order == sorted(order, key=order.index)  # each family's rows side by side
    text = "\n".join(calibration.report_lines([(calibration_rows.KEPT_ASIDE, kept_aside)]))
    assert "AMD / vLLM V0: 21 rows" in text and "0.6 sync" in text


@pytest.fixture(scope="module")
def kept_aside():
    return calibration.compare_group(calibration_rows.KEPT_ASIDE, simulate)


def test_on_rows_kept_aside_the_median_error_is_within_the_goal(kept_aside):
    assert len(kept_aside) == 33
    assert calibration.median_abs_ln(kept_aside) <= 0.15


def test_on_rows_kept_aside_mi300x_is_no_further_off_than_nvidia(kept_aside):
    families = calibration.by_family(kept_aside)
    amd, nvidia = families["AMD / vLLM V0"], families["NVIDIA / vLLM V0"]
    assert calibration.median_abs_ln(amd) <= calibration.median_abs_ln(nvidia)


@pytest.mark.xfail(strict=True, reason="MI300X / H100 at 8B FP8, 2,048/2,048 (decode-heavy, "
                   "256 long contexts): servesim 1.5x, the one row past 0.40; ROCm's paged "
                   "attention of vLLM 0.6 reading KV below the copy kernel's share is not "
                   "modelled: no public measurement of its bandwidth was found (code/README.md)")
def test_on_rows_kept_aside_the_worst_error_is_within_the_goal(kept_aside):
    assert calibration.worst(kept_aside).abs_ln_ratio <= 0.40


def test_tensorrt_llm_offline_throughput_is_within_35_percent():
    comparisons = calibration.compare_group(calibration_rows.THROUGHPUT, simulate)
    assert len(comparisons) == 3
    for comparison in comparisons:
        assert 0.65 <= comparison.ratio <= 1.35, comparison.measurement.id


def test_kv_capacity_is_within_10_percent_of_what_vllm_logged():
    [kv] = calibration.compare_group(calibration_rows.KV_CAPACITY, simulate)
    assert 0.90 <= kv.ratio <= 1.10


def test_a_group_outside_its_band_is_reported_as_not_meeting_its_goal():
    measurement = calibration_rows.KV_CAPACITY.measurements[0]
    off = [calibration.Comparison(measurement, measurement.published * 1.2)]
    assert not calibration.meets_goal(calibration_rows.KV_CAPACITY, off)
    assert "NOT met" in "\n".join(calibration.report_lines([(calibration_rows.KV_CAPACITY, off)]))


@pytest.mark.parametrize("measurement", [m for group in calibration_rows.GROUPS
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
    measurement = calibration_rows.PUBLISHED_MD.measurements[0]
    comparisons = [calibration.Comparison(measurement, 2 * measurement.published)]
    [group] = calibration.to_json([(calibration_rows.PUBLISHED_MD, comparisons)])["groups"]
    [row] = group["rows"]
    assert row["ratio"] == 2.0 and row["run_flags"] == measurement.flags()
    assert group["worst_abs_ln_ratio"] == pytest.approx(0.693, abs=0.001)
    assert group["goal_met"] is False


def test_vllm_0_6_makes_a_300_client_h100_run_slower_for_cpu_reasons():
    """V0's CPU work per scheduled request, paid while the GPU waits, against V1's overlapped."""
    from workload import random_workload
    from forward_model import RooflineClock
    from gpu_memory import plan_memory

    def duration(**engine):
        config = calibration.EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", **engine)
        workload = random_workload(200, 100, 0.0, num_prompts=600, max_concurrency=300)
        return simulate(workload, MODES["chunked"], config, plan_memory(config).num_gpu_blocks,
                        RooflineClock(config)).summary()["duration"]

    v0 = duration(vllm_version="0.6", async_scheduling=False)
    v1_sync = duration(async_scheduling=False)
    v1 = duration()
    assert v0 > 1.05 * v1          # measurably slower
    assert v1 <= v1_sync < v0      # V1 cut the CPU work; async hides what is left


def test_group_picks_the_groups_and_an_unknown_one_is_refused():
    assert [g.name for g in calibration.groups_from_args("kv,published")] == ["published", "kv"]
    assert calibration.groups_from_args(None) == calibration_rows.GROUPS
    with pytest.raises(ConfigError, match="unknown --group nope; choose from published"):
        calibration.groups_from_args("nope")
