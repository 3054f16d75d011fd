"""The workload options on the command line: defaults per dataset, and options that do not fit."""

import pytest

from commands import cli  # noqa: E402  (after the knobs, so that they stay on the first screen)
from config import EngineConfig, Knobs
from workload import WorkloadError
from commands.workload_flags import workload_from_args



def workload_for(*flags: str, max_model_len: int = 8192):
    args = cli.build_parser(Knobs()).parse_args(["compare", *flags])
    return workload_from_args(args, EngineConfig(max_model_len=max_model_len))


def test_mixed_default_keeps_its_own_rate_and_random_sends_all_at_once():
    assert workload_for().params["request_rate"] == 4.0
    assert workload_for("--dataset-name", "random").params["request_rate"] == "inf"
    assert workload_for("--dataset-name", "normal").params["request_rate"] == "inf"


def test_random_dataset_reports_its_parameters_and_ranges():
    params = workload_for("--dataset-name", "random", "--random-input-len", "1000",
                          "--random-output-len", "200", "--random-range-ratio", "0.5",
                          "--num-prompts", "7", "--request-rate", "2", "--max-concurrency",
                          "3").params
    assert params == {"name": "random", "num_prompts": 7, "request_rate": 2.0, "burstiness": 1.0,
                      "seed": 0, "max_concurrency": 3, "random_input_len": 1000,
                      "random_output_len": 200, "random_range_ratio": 0.5,
                      "input_len_range": [500, 1500], "output_len_range": [100, 300]}


def test_normal_lengths_are_clipped_to_the_engines_max_model_len():
    workload = workload_for("--dataset-name", "normal", "--input-mean", "5000",
                            "--input-std", "3000", max_model_len=4096)
    prompts = [r.prompt_len for r in workload.make_requests()]
    assert max(prompts) == 4096
    assert workload.params["max_model_len"] == 4096


@pytest.mark.parametrize("flags, message", [
    (["--random-input-len", "10"],
     "--random-input-len does not apply to --dataset-name mixed; it is for --dataset-name random"),
    (["--dataset-name", "random", "--output-mean", "10"],
     "--output-mean does not apply to --dataset-name random; it is for --dataset-name normal"),
    (["--trace-time-scale", "2"],
     "--trace-time-scale does not apply to --dataset-name mixed; it is for --trace"),
    (["--trace", "t.csv", "--dataset-name", "random"],
     "--dataset-name random and --trace both say what to send; give one of them"),
])
def test_an_option_for_another_workload_is_refused(flags, message):
    with pytest.raises(WorkloadError) as error:
        workload_for(*flags)
    assert str(error.value) == message


def test_request_rate_with_a_trace_points_to_the_time_scale():
    with pytest.raises(WorkloadError, match="scale them with --trace-time-scale"):
        workload_for("--trace", "t.csv", "--request-rate", "5")
