"""The lesson's orderings come out of the model on the default workload, seed after seed."""

import pytest

from config import EngineConfig
from forward_model import make_clock
from gpu_memory import plan_memory
from main import simulate
from modes import MODES
from workload import DEFAULT_NUM_PROMPTS, mixed_workload


def default_results(seed):
    config = EngineConfig()
    plan, clock = plan_memory(config), make_clock(config)
    workload = mixed_workload(seed=seed)
    return {mode.name: simulate(workload, mode, config, plan.num_gpu_blocks, clock).summary()
            for mode in MODES.values()}


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_continuous_beats_static_beats_naive_and_chunking_cuts_the_itl_tail(seed):
    r = default_results(seed)
    naive, static = r["NAIVE"], r["STATIC"]
    continuous, chunked = r["CONTINUOUS"], r["CONTINUOUS+CHUNKED"]
    assert (continuous["output_throughput"] > static["output_throughput"]
            > naive["output_throughput"])
    assert chunked["p99_itl_ms"] < continuous["p99_itl_ms"]
    assert abs(chunked["output_throughput"] / continuous["output_throughput"] - 1) < 0.10
    assert all(m["completed"] == DEFAULT_NUM_PROMPTS for m in r.values())
