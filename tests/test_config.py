"""Validation in one place: every field has a rule, the rules say what is valid, and every
configuration servesim itself builds (calibration, lesson-check, the benchmark) passes them."""

import math
from dataclasses import fields, replace

import pytest

from config import FIELD_RULES, ConfigError, EngineConfig, Range, valid_tensor_parallel_sizes
from modes import MODES


def test_every_engine_field_has_a_rule():
    # A new flag's field without a row in FIELD_RULES would go unchecked: this fails first.
    assert set(FIELD_RULES) == {f.name for f in fields(EngineConfig)}


@pytest.mark.parametrize("rule, good, bad", [
    (Range(0, 1, above_low=True), [1e-9, 0.5, 1, 1.0], [0, 1.0001, math.nan, math.inf, "0.5"]),
    (Range(1, 10, integer=True), [1, 10], [0, 11, 2.0, True, None, 10**400]),
    (Range(16, 64, multiple_of=16, integer=True), [16, 48], [8, 24, 80]),
    (Range(16, 64, multiple_of=16, integer=True, also=(1, 8)), [1, 8, 16, 48], [2, 24, 80, 8.0]),
    (Range(0, 1e9, above_low=True, allow_inf=True), [1e-300, 1e9, math.inf], [0, -math.inf,
                                                                              math.nan, 2e9]),
    (Range(0, 1, below_high=True), [0, 0.999], [1, -0.0001]),
    (Range(1, 5, integer=True, optional=True), [None, 3], [0]),
])
def test_a_range_holds_exactly_what_it_describes(rule, good, bad):
    assert all(rule.contains(value) for value in good), rule.describe()
    assert not any(rule.contains(value) for value in bad), rule.describe()


def test_a_range_says_what_is_valid_in_one_line():
    with pytest.raises(ConfigError) as refused:
        Range(0, 60_000, unit="ms").check("--batching-window-ms", math.nan)
    assert str(refused.value) == "--batching-window-ms must be a number in [0, 60,000] ms, got nan"


def test_tensor_parallel_degrees_split_the_heads_and_the_kv_heads_as_vllm_requires():
    # Llama 3 70B: 64 heads, 8 KV heads; above 8 GPUs each keeps a copy of one KV head.
    assert valid_tensor_parallel_sizes("llama-3.3-70b") == [1, 2, 4, 8, 16, 32, 64]
    # Qwen2.5-7B: 28 heads, 4 KV heads: 7 and 14 split the heads but not the KV heads.
    assert valid_tensor_parallel_sizes("qwen2.5-7b") == [1, 2, 4, 28]
    # OPT-13B: 40 heads, 40 KV heads: the divisors of 40.
    assert valid_tensor_parallel_sizes("opt-13b") == [1, 2, 4, 5, 8, 10, 20, 40]


def test_the_defaults_and_the_knobs_pass():
    EngineConfig().validate()
    for mode in MODES.values():
        mode.check(EngineConfig())


def builtin_configs() -> list:
    from commands import benchmark, calibration_rows, lesson_check
    configs = [m.config() for group in calibration_rows.GROUPS for m in group.measurements]
    configs += [lesson_check.LESSON, lesson_check.H100_BEST, *lesson_check.ELSEWHERE]
    configs += [make_config() for _, _, make_config, _ in benchmark.CASES.values()]
    return configs


def test_every_configuration_servesim_builds_itself_passes_validation():
    from commands import calibration_rows
    for config in builtin_configs():
        config.validate()
    for measurement in (m for group in calibration_rows.GROUPS for m in group.measurements):
        MODES[measurement.mode].check(measurement.config())


@pytest.mark.parametrize("changes, field", [
    (dict(linear_step_ms=0, linear_prefill_token_ms=0, forward_model="linear"),
     "--linear-step-ms 0 with --linear-prefill-token-ms 0"),
    (dict(long_prefill_token_threshold=100, max_model_len=99), "--long-prefill-token-threshold"),
    (dict(tensor_parallel_size=6), "--tensor-parallel-size 6"),
])
def test_vllms_start_up_refusals_name_the_flags_that_clash(changes, field):
    with pytest.raises(ConfigError, match=field):
        replace(EngineConfig(), **changes).validate()


def test_a_budget_below_max_num_seqs_is_refused_only_where_the_budget_applies():
    config = EngineConfig(max_num_seqs=1024)  # the 512-token chunked budget is too small
    with pytest.raises(ConfigError, match="--default-chunked-budget 512 is below --max-num-seqs"):
        MODES["chunked"].check(config)
    MODES["continuous"].check(config)  # max(8192, 2048) holds 1024
    MODES["static"].check(config)      # a padded batch has no token budget


def test_a_trace_without_ids_keeps_its_numbering(tmp_path):
    from traces.replay import trace_workload
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,10,2\n1,10,2\n2,10,2\n")
    assert [r.request_id for r in trace_workload(str(path)).make_requests()] == ["0", "1", "2"]


def test_a_switch_given_twice_the_same_way_is_fine(capsys):
    from conftest import servesim_here
    code, _, err = servesim_here(capsys, "--enable-chunked-prefill", "--enable-chunked-prefill",
                                 "--num-prompts", "2", "--mode", "chunked")
    assert code == 0, err
