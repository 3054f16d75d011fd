"""What to tune for a bottleneck, each change served again to see what it buys.

For the bottleneck found (bottleneck.py), the candidate changes come scheduler knobs first, more
GPUs last; each is served again on top of the changes kept before it, and kept only if the
bottleneck's own metric improves by IMPROVEMENT_PCT or more. After a kept change the run is
read again, and the next change addresses what limits it now: fixing one bottleneck often
shows the next (a bigger batch may starve the KV cache). It stops when no candidate is left,
after MAX_RESIMULATIONS runs, or once a change has moved the run on to `decode_floor` or
`none`: the scheduler is no longer the limit, so the diagnosis is done (a run that starts
there gets that bottleneck's own candidates).

    bottleneck                 candidates, in order
    hbm_bound, kv_starvation   drop --num-gpu-blocks-override; --gpu-memory-utilization 0.95;
                               --kv-cache-dtype fp8; then --tensor-parallel-size x2 (or the
                               fewest GPUs with which vLLM would start)
    batching_stall             --max-num-seqs up to what the KV holds; or, when decodes alone
                               spend the budget, a larger budget
    chunk_missized             the budget whose full chunk step meets the per-token SLO, never
                               below the GEMM ridge (chunking off: chunked prefill on, with
                               such a budget)
    decode_floor               EAGLE-3 (k = 3) where a head for the model is published; then
                               --tensor-parallel-size x2
    none, compute full         --tensor-parallel-size x2
"""

import argparse
import copy
import json
import math
import shlex
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from commands.bottleneck import BEST_UTILIZATION, Finding
from commands.vllm_facts import serve_batch_defaults
from config import ConfigError, EngineConfig
from forward_model import RooflineClock
from gpu_memory import lookup, memory_layout, plan_memory

MAX_RESIMULATIONS = 4   # runs beside the first: diagnose serves the workload at most 5 times
IMPROVEMENT_PCT = 5.0   # a change is kept if it lowers its metric by at least this much
MAX_TENSOR_PARALLEL = 8  # one node's GPUs
LARGEST_BUDGET = 16384  # vLLM 0.30.0's largest default budget (GPUs of 160 GiB or more)
# EAGLE-3 heads published for servesim's models (Hugging Face, the EAGLE authors' own); an
# FP8 target takes its 16-bit twin's head.
EAGLE3_HEADS = {"llama-3.1-8b": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "llama-3.1-8b-fp8": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "llama-3.3-70b": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
                "llama-3.3-70b-fp8": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}
NUM_DRAFTS = 3  # k: vLLM's measured acceptance is for 3 (spec_decode.DEFAULT_ACCEPTANCE)


@dataclass(frozen=True)
class Change:
    """One flag as a user would type it, and what it sets among the parsed flags."""
    flag: str
    value: object   # as typed (None: leave the flag out)
    dest: str       # the argparse destination it sets
    setting: object  # the value it sets there

    def text(self) -> str:
        if self.value is None:
            return f"leave out {self.flag}"
        if self.value is True:
            return self.flag
        return f"{self.flag} {shlex.quote(str(self.value))}"  # as a shell would take it


@dataclass
class Trial:
    """One candidate served again: what it changed, against which bottleneck, and what came."""
    changes: list[Change]
    addresses: str           # the bottleneck it was tried against
    metric: str
    before: Optional[float]  # None: the config before it could not start
    after: Optional[float]   # None: the config with it could not start
    refusal: str = ""        # why it could not start, if it could not
    also: dict = field(default_factory=dict)  # other metrics: name -> (before, after)
    kept: bool = False

    def as_json(self) -> dict:
        first = self.changes[0]
        return {"flag": first.flag, "value": first.value,
                "flags": {change.flag: change.value for change in self.changes},
                "addresses": self.addresses, "metric": self.metric, "before": self.before,
                "after": self.after, "refused": self.refusal or None,
                "also": {name: list(pair) for name, pair in self.also.items()}}


SIDE_METRICS = ("output_throughput", "request_goodput", "mean_ttft_ms", "p99_itl_ms")


def recommend(baseline, evaluate: Callable) -> tuple[list[Trial], list[Trial], object]:
    """Serve candidates for the baseline's bottleneck and those it leads to. `baseline` and what
    `evaluate(args)` returns are diagnose.Evaluation; returns (kept, not kept, last kept run)."""
    current, kept, rejected, tried_flags = baseline, [], [], set()
    while len(kept) + len(rejected) < MAX_RESIMULATIONS:
        finding = current.finding
        if finding.metric is None or (finding.bottleneck in ("decode_floor", "none")
                                      and finding.bottleneck != baseline.finding.bottleneck):
            break
        changes = next((c for c in candidates(current) if c[0].flag not in tried_flags), None)
        if changes is None:
            break
        tried_flags.add(changes[0].flag)
        trial_run = evaluate(apply(current.args, changes))
        trial = judge(changes, finding, current, trial_run)
        if trial.kept:
            kept.append(trial)
            current = trial_run
        else:
            rejected.append(trial)
    return kept, rejected, current


def apply(args: argparse.Namespace, changes: list[Change]) -> argparse.Namespace:
    changed = copy.copy(args)
    for change in changes:
        setattr(changed, change.dest, change.setting)
    return changed


def judge(changes: list[Change], finding: Finding, before, after) -> Trial:
    metric = finding.metric
    before_value = before.summary[metric] if before.summary else None
    after_value = after.summary[metric] if after.summary else None
    trial = Trial(changes, finding.bottleneck, metric, before_value, after_value,
                  refusal=after.refusal or "")
    if after.summary is None:
        return trial
    if before.summary is not None:
        trial.also = {name: (before.summary.get(name), after.summary.get(name))
                      for name in SIDE_METRICS if name != metric and name in after.summary}
    trial.kept = (before_value is None
                  or after_value <= before_value * (1 - IMPROVEMENT_PCT / 100))
    return trial


# -- the candidates, by bottleneck ---------------------------------------------------------------

def candidates(run) -> list[list[Change]]:
    """The changes to try for the run's bottleneck, in order (each a list of flags set together)."""
    finding, config = run.finding, run.config
    hardware = [[more_gpus(config)]] if config.tensor_parallel_size < MAX_TENSOR_PARALLEL else []
    if finding.bottleneck in ("hbm_bound", "kv_starvation"):
        return memory_candidates(config) + hardware
    if finding.bottleneck == "batching_stall":
        if finding.kind == "max_num_seqs":
            seats = more_seats(run)
            return [[seats]] if seats.value > config.max_num_seqs else []  # the budget caps it
        return [[budget_change(max(2 * config.token_budget(run.chunked), slo_budget(run)))]]
    if finding.bottleneck == "chunk_missized":
        return chunk_candidates(run)
    if finding.bottleneck == "decode_floor":
        drafts = [[eagle3(config)]] if config.model in EAGLE3_HEADS and not (
            config.speculative_config) else []
        return drafts + hardware
    return hardware  # none: the compute is full


def memory_candidates(config: EngineConfig) -> list[list[Change]]:
    """More KV from the same GPU: the pool sized from memory, more of the memory, FP8 KV. None
    of them helps weights that do not fit even at the highest utilization."""
    best = memory_layout(replace(config, gpu_memory_utilization=max(
        BEST_UTILIZATION, config.gpu_memory_utilization), num_gpu_blocks_override=None))
    if best.weight_bytes + best.activation_reserve_bytes >= best.usable_bytes:
        return []
    changes = []
    if config.num_gpu_blocks_override is not None:
        sized = memory_layout(replace(config, num_gpu_blocks_override=None))
        if sized.num_gpu_blocks > config.num_gpu_blocks_override:
            changes.append([Change("--num-gpu-blocks-override", None, "num_gpu_blocks_override",
                                   None)])
    if config.gpu_memory_utilization < BEST_UTILIZATION:
        changes.append([Change("--gpu-memory-utilization", BEST_UTILIZATION,
                               "gpu_memory_utilization", BEST_UTILIZATION)])
    if config.kv_cache_dtype == "auto":
        changes.append([Change("--kv-cache-dtype", "fp8", "kv_cache_dtype", "fp8")])
    return changes


def more_gpus(config: EngineConfig) -> Change:
    """More GPUs (tensor parallelism): the fewest, a power of two up to one node's eight, with
    which vLLM would start; twice as many as now if it already starts."""
    tp = 2 * config.tensor_parallel_size
    while tp < MAX_TENSOR_PARALLEL and not starts(replace(config, tensor_parallel_size=tp)):
        tp *= 2
    tp = min(tp, MAX_TENSOR_PARALLEL)
    return Change("--tensor-parallel-size", tp, "tensor_parallel_size", tp)


def starts(config: EngineConfig) -> bool:
    try:
        plan_memory(config)
    except ConfigError:
        return False
    return True


def more_seats(run) -> Change:
    """--max-num-seqs: as many mean-length requests as the KV cache holds (a power of two),
    at most vLLM's default for the GPU and the token budget (vLLM refuses more seats than
    tokens), at least twice the seats there are."""
    config, summary = run.config, run.summary
    mean_sequence = (summary["total_input_tokens"] + summary["total_output_tokens"]) / summary[
        "completed"]
    _, default_seqs = serve_batch_defaults(lookup(config)[1])
    fits = 2 ** int(math.log2(max(1.0, run.finding.evidence["kv_cache_tokens"] / mean_sequence)))
    seats = min(max(2 * config.max_num_seqs, min(default_seqs, fits)),
                config.token_budget(run.chunked))
    return Change("--max-num-seqs", seats, "max_num_seqs", seats)


def chunk_candidates(run) -> list[list[Change]]:
    budget = run.config.token_budget(run.chunked)
    sized = slo_budget(run)
    if run.finding.kind == "too_small":
        return [[budget_change(sized)]] if sized > budget else []
    if not run.chunked:  # with the budget said, as vLLM's default would be another
        return [[Change("--enable-chunked-prefill", True, "enable_chunked_prefill", True),
                 budget_change(sized)]]
    return [[budget_change(sized)]] if sized < budget else []


def budget_change(tokens: int) -> Change:
    return Change("--max-num-batched-tokens", tokens, "max_num_batched_tokens", tokens)


def slo_budget(run) -> int:
    """The largest power-of-two budget whose full step (a chunk of what the run's mean batch of
    decodes leaves, beside them) the clock prices within the per-token SLO: the biggest chunk
    that never stalls a decode past it; but never below the GEMM ridge, where a chunk would
    cost a stream of the weights for a few tokens (a chunk too small), nor below max_num_seqs."""
    evidence, summary = run.finding.evidence, run.summary
    clock = RooflineClock(run.config)
    num_decodes = max(1, round(summary["mean_batch_size"]))
    context = round((summary["total_input_tokens"] + summary["total_output_tokens"] / 2)
                    / summary["completed"])

    def step_ms(budget: int) -> float:
        chunk = max(1, budget - num_decodes)
        return 1000 * clock.price(chunk + num_decodes, num_decodes + 1,
                                  chunk * (chunk + 1) // 2 + num_decodes * (context + 1),
                                  num_decodes * context)

    smallest = max(2 ** math.ceil(math.log2(evidence["gemm_ridge_tokens"])),
                   run.config.max_num_seqs)  # vLLM refuses a budget below max_num_seqs
    budget = LARGEST_BUDGET
    while budget > smallest and step_ms(budget) > evidence["tpot_slo_ms"]:
        budget //= 2
    return max(budget, smallest)


def eagle3(config: EngineConfig) -> Change:
    text = json.dumps({"method": "eagle3", "model": EAGLE3_HEADS[config.model],
                       "num_speculative_tokens": NUM_DRAFTS})
    return Change("--speculative-config", text, "speculative_config", text)
