"""The engine's own time: CPU work each step, by vLLM version, and whether the GPU waits for it.

Between two forward passes an engine's CPU does work the GPU does not: it schedules (who runs,
how many tokens each), prepares the inputs (positions, block tables, slot mappings), and turns
the sampled token ids into outputs (stop checks, detokenization). In vLLM V0 (0.5-0.6) that was
Python per sequence per step, and the GPU sat idle while it ran: vLLM's own profile of Llama 3
8B on one H100 (v0.5.3) found 38% of the time on the GPU and 29% on scheduling and input
preparation ("vLLM v0.6.0: 2.7x Throughput Improvement", blog.vllm.ai, 2024-09-05). V1 rewrote
the loop around a persistent batch that changes incrementally (vLLM V1 alpha blog, 2025-01-27),
and async scheduling (`--async-scheduling`, vllm/v1/core/sched/async_scheduler.py; on by default
since vLLM PR #27614, late 2025) prepares step n+1 while step n runs on the GPU.

servesim prices that CPU work per step as

    cpu = step_s + per_request_s x scheduled requests + per_token_s x sampled tokens

and the step's wall time as

    sync   gpu + cpu          the GPU waits for the CPU every step
    async  max(gpu, cpu)      the CPU part of step n+1 overlaps the GPU part of step n

(the clock keeps the two apart, `StepCost`, so that a loop can overlap them exactly). What the
numbers below rest on is said beside each; they are estimates from published profiles, not
measurements of one row.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineVersion:
    version: str                  # as --vllm-version takes it
    generation: str               # "V0" or "V1": the engine's architecture
    step_s: float                 # CPU per step, whatever it carries
    per_request_s: float          # CPU per scheduled request (input preparation, bookkeeping)
    per_token_s: float            # CPU per sampled token the GPU waits for (output processing)
    has_async_scheduling: bool    # can --async-scheduling be on at all
    async_scheduling_default: bool
    gpu_memory_utilization_default: float  # `vllm serve`'s default (vllm/config/cache.py)
    not_modelled: str             # scheduling rules of this version servesim does not follow
    source: str

    def cpu_s(self, num_requests: int, num_sampled: int) -> float:
        """Seconds of CPU work for a step of `num_requests` scheduled requests."""
        return (self.step_s + self.per_request_s * num_requests
                + self.per_token_s * num_sampled)


# V0: the v0.6.0 blog's profile (Llama 3 8B, 1 x H100, v0.5.3, ShareGPT at high load): 29% of
# the time scheduling and preparing inputs against 38% on the GPU. A Llama-8B step on an H100
# takes about 5 ms on the GPU (V1 alpha blog), so that CPU work is about 3.8 ms a step. vLLM 0.6
# moved the API server to its own process and overlapped output processing with the next step
# (async output processor, PR #7049, +12% throughput alone: about 0.6 ms of a 5 ms step), which
# leaves about 3.2 ms; at the 150 or so requests such a load keeps running (an estimate), a base
# of 0.5 ms and 18 us per scheduled request. Detokenization is hidden (per_token_s 0).
V0_6 = EngineVersion(
    "0.6", "V0", step_s=0.5e-3, per_request_s=18e-6, per_token_s=0.0,
    has_async_scheduling=False, async_scheduling_default=False,
    gpu_memory_utilization_default=0.9,
    not_modelled="vLLM 0.6 (V0) schedules waiting prompts before running decodes and chunks no "
                 "prompt unless asked; servesim runs its V1 scheduler with V0's CPU costs",
    source="vLLM v0.6.0 performance blog (2024-09-05) profile; async output processor PR #7049")

# V1: the CPU work per request is a fraction of V0's (persistent batch, incremental updates,
# the engine core in its own process: V1 alpha blog). Sized from vLLM's TPU backend turning async
# scheduling on (vllm-project/tpu-inference PR #924: Llama-3.2-1B at up to 256 requests, 6.38 ->
# 8.89 req/s, +39%): hiding the CPU work saved 0.39 of a GPU step, about 1.7 ms of a ~4.5 ms step
# (an estimate) at 256 requests: a base of 0.4 ms and 5 us per scheduled request.
_V1 = dict(generation="V1", step_s=0.4e-3, per_request_s=5e-6, per_token_s=0.0,
           has_async_scheduling=True, async_scheduling_default=True, not_modelled="",
           source="vLLM V1 alpha blog (2025-01-27); tpu-inference PR #924 (async on: +39%); "
                  "async scheduling on by default since vLLM PR #27614")
VERSIONS = {
    "0.6": V0_6,
    # 0.18.0: V1 with async scheduling on by default, --gpu-memory-utilization 0.9.
    "0.18.0": EngineVersion("0.18.0", gpu_memory_utilization_default=0.9, **_V1),
    # 0.30.0: the version servesim follows; its cache config defaults to 0.92.
    "0.30.0": EngineVersion("0.30.0", gpu_memory_utilization_default=0.92, **_V1),
}
DEFAULT_VERSION = "0.30.0"


@dataclass(frozen=True, slots=True)
class StepCost:
    """One step's time in two parts: the GPU's forward pass and the CPU's work around it."""
    gpu_s: float
    cpu_s: float

    def wall_s(self, async_scheduling: bool) -> float:
        return step_wall_s(self.gpu_s, self.cpu_s, async_scheduling)


def step_wall_s(gpu_s: float, cpu_s: float, async_scheduling: bool) -> float:
    """The step's share of the clock: sync, the GPU waits for the CPU; async, the CPU's work
    for the next step runs while this one is on the GPU (the longer of the two)."""
    if async_scheduling:
        return max(gpu_s, cpu_s)
    return gpu_s + cpu_s
