"""What to tune: a bounded search over the engine's knobs, judged on the user's SLO.

The objective is the user's: goodput under --goodput, counted as the requests that met every
SLO. A change is kept (`judge`) only if

    it raises goodput (IMPROVEMENT_PCT more of the requests, and at least one, meet every
    SLO), or, at equal goodput (no fewer meet it, and not that many more), it lowers the
    bottleneck's own metric by IMPROVEMENT_PCT or more while no headline metric (mean TTFT,
    mean TPOT, P99 ITL, output throughput) gets worse by more than WORSENING_PCT. A change that
    lets fewer requests meet the SLO is never kept. (A gain of one request in forty is within
    what one draw of the workload decides, so it counts as equal.)

The search is greedy over re-simulations. A round serves every candidate change of one flag
(`candidates`: every scheduler and cache knob, in both directions) on top of the config so far,
and applies the best change that passes; the next round serves the candidates again on top of
it (moving one knob moves what the others buy). It stops when a round keeps nothing, after
MAX_ROUNDS rounds, or at MAX_RESIMULATIONS runs. Only then, and only if the run
still misses the SLO target (fewer than SLO_ATTAINMENT_PCT of the requests meet every SLO), are
more GPUs tried: twice the tensor parallelism and twice the replicas (cluster.py's replicas,
round-robin), and as many GPUs one size up, each served, side by side; one is kept only if it
raises goodput, the one with the higher goodput per GPU. No recommendation adds GPUs while a
change on the same GPUs meets the target.

    the knobs, both ways   --max-num-seqs x2 and /2, and to the requests the pool holds
                           (`seats_the_pool_holds`); --max-num-batched-tokens x2 and /2;
                           --long-prefill-token-threshold on (half the budget) or off; chunked
                           prefill off, or on with a budget whose step meets the per-token SLO
                           (`slo_budget`); --max-model-len down to the workload's longest
                           request; --gpu-memory-utilization up to 0.95; --kv-cache-dtype fp8
                           (an accuracy trade, vLLM's quantized-KV docs); prefix caching on;
                           --num-gpu-blocks-override left out; speculation off, or its k one
                           up and one down, or EAGLE-3 on where a head is published
    then hardware          --tensor-parallel-size x2 (or the fewest GPUs with which vLLM
                           starts); --data-parallel-size x2; --gpu one size up (`bigger_gpu`)
"""

import argparse
import copy
import json
import math
import shlex
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from commands.bottleneck import BEST_UTILIZATION
from config import ConfigError, EngineConfig
from forward_model import RooflineClock
from goodput import CHAT_SLOS_MS
from gpu_memory import plan_memory
from presets import GPUS

IMPROVEMENT_PCT = 5.0    # goodput raised: this share more of the requests meet every SLO; at
#                          equal goodput, the bottleneck's metric must fall this much ...
WORSENING_PCT = 10.0     # ... while no headline metric worsens by more than this
SLO_ATTAINMENT_PCT = 90.0  # the SLO is met when this share of requests meets every SLO: the
#                            attainment target DistServe (Zhong et al., OSDI 2024) plans for
MAX_ROUNDS = 3
MAX_RESIMULATIONS = 30   # knob runs beside the first (and at most two of hardware): a few
#                          hundred requests stay under about 10 s
MAX_TENSOR_PARALLEL = 8  # one node's GPUs
BIGGER_MEMORY = 1.5      # a bigger GPU has at least this many times the memory (L4 -> L40S,
#                          H100 -> H200, MI300X -> MI355X)
MAX_BUDGET = 65536       # the top of the budgets published guidance tries (Vultr's cookbook)
LARGEST_DEFAULT_BUDGET = 16384  # vLLM 0.30.0's largest default budget (GPUs of 160 GiB or more)
# EAGLE-3 heads published for servesim's models (Hugging Face, the EAGLE authors' own); an
# FP8 target takes its 16-bit twin's head.
EAGLE3_HEADS = {"llama-3.1-8b": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "llama-3.1-8b-fp8": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "llama-3.3-70b": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
                "llama-3.3-70b-fp8": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}
FP8_KV_CAVEAT = ("an accuracy trade: each cached key and value is stored in 8 bits (E4M3 or "
                 "E5M2, with scales; vLLM's Quantized KV Cache docs): check the model's accuracy "
                 "on the deployment's own prompts before serving it")
NUM_DRAFTS = 3  # k: vLLM's measured acceptance is for 3 (spec_decode.DEFAULT_ACCEPTANCE)

# The headline metrics a kept change may not worsen by more than WORSENING_PCT, and which way
# is better for each (True: lower). Every kept change prints them all, before -> after.
HEADLINE = {"mean_ttft_ms": True, "mean_tpot_ms": True, "p99_itl_ms": True,
            "output_throughput": False}


@dataclass(frozen=True)
class Change:
    """One flag as a user would type it, and what it sets among the parsed flags."""
    flag: str
    value: object   # as typed (None: leave the flag out; True/False: a --[no-] switch)
    dest: str       # the argparse destination it sets
    setting: object  # the value it sets there
    caveat: str = ""  # what it costs beyond the figures the search compares, if anything

    def text(self) -> str:
        if self.value is None:
            return f"leave out {self.flag}"
        if self.value is True:
            return self.flag
        if self.value is False:
            return "--no-" + self.flag[2:]
        return f"{self.flag} {shlex.quote(str(self.value))}"  # as a shell would take it


@dataclass
class Trial:
    """One candidate served again: what it changed, on top of which config, and what came."""
    changes: list[Change]
    addresses: str           # the bottleneck of the config it was tried on
    metric: str              # that bottleneck's metric (good_requests when it has none)
    before: Optional[float]  # the metric before; None: the config before could not start
    after: Optional[float]   # after; None: the config with it could not start
    num_gpus: tuple = (1, 1)  # GPUs before and after
    refusal: str = ""        # why it could not start, if it could not
    also: dict = field(default_factory=dict)  # every headline metric and goodput: (before, after)
    kept: bool = False
    why: str = ""            # the judgement, in one phrase

    def as_json(self) -> dict:
        first = self.changes[0]
        return {"flag": first.flag, "value": first.value,
                "flags": {change.flag: change.value for change in self.changes},
                "addresses": self.addresses, "metric": self.metric, "before": self.before,
                "after": self.after, "gpus": list(self.num_gpus), "kept": self.kept,
                "why": self.why, "refused": self.refusal or None,
                "also": {name: list(pair) for name, pair in self.also.items()},
                "caveats": [change.caveat for change in self.changes if change.caveat]}


@dataclass
class Search:
    """What the search found: the changes kept in order, those tried and not kept, the run
    after the kept ones, and the hardware options served side by side."""
    kept: list[Trial]
    rejected: list[Trial]
    final: object             # diagnose.Evaluation
    hardware: list[Trial]     # the more-GPU options served (kept or not), side by side


def good_requests(run) -> int:
    """Requests that met every SLO (diagnose adds the count to the summary)."""
    return run.summary["good_requests"]


def meets_slo(run) -> bool:
    """Did SLO_ATTAINMENT_PCT of the requests sent meet every SLO?"""
    summary = run.summary
    return summary is not None and (100 * summary["good_requests"] >= SLO_ATTAINMENT_PCT
                                    * (summary["completed"] + summary["rejected"]))


def num_gpus(run) -> int:
    return run.config.tensor_parallel_size * getattr(run.args, "data_parallel_size", 1)


def search(baseline, evaluate: Callable, workload_facts) -> Search:
    """The knobs first, in rounds; then, only if the SLO is still missed, more GPUs."""
    current, kept, rejected, runs = baseline, [], [], 0
    for _ in range(MAX_ROUNDS):
        served = []
        for changes in candidates(current, workload_facts)[:max(0, MAX_RESIMULATIONS - runs)]:
            trial_run = evaluate(apply(current.args, changes))
            served.append((judge(changes, current, trial_run), trial_run))
        runs += len(served)
        passed = [(trial, trial_run) for trial, trial_run in served if trial.kept]
        if not passed:
            rejected += [trial for trial, _ in served]
            break
        best, current = max(passed, key=lambda pair: _rank(pair[1], current))
        for trial, _ in served:
            trial.kept = trial is best
        kept.append(best)
        rejected += [trial for trial, _ in served if trial is not best]
    hardware = []
    if not meets_slo(current):
        served = []
        for changes in hardware_candidates(current):
            trial_run = evaluate(apply(current.args, changes))
            served.append((judge(changes, current, trial_run), trial_run))
        for trial, trial_run in served:  # more GPUs must raise goodput, not merely speed it up
            if trial.kept and trial.before is not None and (
                    good_requests(trial_run) - good_requests(current) < raised_by(current)):
                trial.kept, trial.why = False, "more or bigger GPUs, and goodput not raised"
        hardware = [trial for trial, _ in served]
        passed = [(trial, trial_run) for trial, trial_run in served if trial.kept]
        if passed:
            best, current = max(passed, key=lambda pair: _per_gpu(pair[0], pair[1]))
            for trial in hardware:
                trial.kept = trial is best
            kept.append(best)
    return Search(kept, rejected, current, hardware)


def _per_gpu(trial: Trial, run) -> tuple:
    """More GPUs are compared per GPU: requests meeting every SLO, then goodput (req/s), so
    that of two options every request meets the SLO on, the one serving them sooner wins."""
    gpus = trial.num_gpus[1]
    return good_requests(run) / gpus, run.summary["request_goodput"] / gpus


def _rank(run, before) -> tuple:
    """Higher is better: goodput raised, then how many more met the SLO, then how far the
    bottleneck's metric fell."""
    if before.summary is None:
        return good_requests(run), 0.0
    gained = good_requests(run) - good_requests(before)
    metric = before.finding.metric
    fall = 0.0
    if metric is not None and before.summary[metric]:
        fall = 1 - run.summary[metric] / before.summary[metric]
    return gained >= raised_by(before), gained, fall


def apply(args: argparse.Namespace, changes: list[Change]) -> argparse.Namespace:
    changed = copy.copy(args)
    for change in changes:
        setattr(changed, change.dest, change.setting)
    return changed


def judge(changes: list[Change], before, after) -> Trial:
    """Kept if it raises goodput, or at equal goodput lowers the bottleneck's metric by
    IMPROVEMENT_PCT without worsening a headline metric by more than WORSENING_PCT."""
    metric = before.finding.metric if before.finding is not None else None
    metric = metric or "good_requests"
    trial = Trial(changes, before.finding.bottleneck if before.finding else "refused", metric,
                  before.summary.get(metric) if before.summary else None,
                  after.summary.get(metric) if after.summary else None,
                  num_gpus=(num_gpus(before) if before.config else 1,
                            num_gpus(after) if after.config else 1),
                  refusal=after.refusal or "")
    if after.summary is None:
        trial.why = "could not start"
        return trial
    if before.summary is None:
        trial.kept, trial.why = True, "starts, where the config before it could not"
        return trial
    trial.also = {name: (before.summary[name], after.summary[name])
                  for name in ("good_requests", "request_goodput", *HEADLINE)}
    gained = good_requests(after) - good_requests(before)
    if gained >= raised_by(before):
        trial.kept, trial.why = True, f"{gained} more request(s) meet every SLO"
    elif gained < 0:
        trial.why = f"{-gained} fewer request(s) meet every SLO"
    elif metric == "good_requests":
        trial.why = "goodput not raised, and nothing limits the run"
    else:
        trial.kept, trial.why = _at_equal_goodput(metric, before.summary, after.summary)
        if gained:
            trial.why += f" ({gained:+d} meeting every SLO counts as equal: below {raised_by(before)})"
    return trial


def raised_by(run) -> int:
    """How many more requests must meet every SLO for goodput to count as raised."""
    sent = run.summary["completed"] + run.summary["rejected"]
    return max(1, math.ceil(IMPROVEMENT_PCT / 100 * sent))


def _at_equal_goodput(metric: str, before: dict, after: dict) -> tuple[bool, str]:
    if after[metric] > before[metric] * (1 - IMPROVEMENT_PCT / 100):
        return False, f"equal goodput, and {metric} fell less than {IMPROVEMENT_PCT:g}%"
    for name, lower_is_better in HEADLINE.items():
        if _worsened_pct(before[name], after[name], lower_is_better) > WORSENING_PCT:
            return False, f"equal goodput, and {name} worsened more than {WORSENING_PCT:g}%"
    return True, f"equal goodput, and {metric} fell {IMPROVEMENT_PCT:g}% or more"


def _worsened_pct(before: float, after: float, lower_is_better: bool) -> float:
    if before == 0:
        return 0.0 if after == 0 or not lower_is_better else math.inf
    change = 100 * (after - before) / before
    return change if lower_is_better else -change


# -- the candidates ------------------------------------------------------------------------------

def candidates(run, workload_facts) -> list[list[Change]]:
    """Every scheduler and cache knob, one change at a time, both ways, on the same GPUs."""
    if run.config is None:
        return []
    config, chunked = run.config, run.chunked
    budget = config.token_budget(chunked)
    options = [[_set("--max-num-seqs", "max_num_seqs", config.max_num_seqs * 2)]]
    if config.max_num_seqs > 1:
        options.append([_set("--max-num-seqs", "max_num_seqs", config.max_num_seqs // 2)])
    seats = seats_the_pool_holds(run, workload_facts)
    if seats and not config.max_num_seqs // 2 <= seats <= config.max_num_seqs * 2:
        options.append([_set("--max-num-seqs", "max_num_seqs", seats)])
    if budget * 2 <= MAX_BUDGET:
        options.append([_set("--max-num-batched-tokens", "max_num_batched_tokens", budget * 2)])
    if budget // 2 >= config.max_num_seqs:  # vLLM refuses a budget below max_num_seqs
        options.append([_set("--max-num-batched-tokens", "max_num_batched_tokens", budget // 2)])
    if chunked:
        threshold = 0 if config.long_prefill_token_threshold else budget // 2
        options.append([_set("--long-prefill-token-threshold", "long_prefill_token_threshold",
                             threshold)])
    if chunked:
        options.append([Change("--enable-chunked-prefill", False, "enable_chunked_prefill",
                               False)])
    else:  # on, with a budget that slices: the old one would take the same prompts whole
        options.append([Change("--enable-chunked-prefill", True, "enable_chunked_prefill", True),
                        _set("--max-num-batched-tokens", "max_num_batched_tokens",
                             slo_budget(run))])
    if workload_facts.longest_request_tokens < config.max_model_len // 2:
        shorter = workload_facts.longest_request_tokens
        options.append([replace(_set("--max-model-len", "max_model_len", shorter), caveat=(
            f"vLLM then refuses a request whose prompt and max_tokens pass {shorter:,} tokens "
            "(this workload's longest): keep it above what the deployment is sent"))])
    if config.gpu_memory_utilization < BEST_UTILIZATION:
        options.append([_set("--gpu-memory-utilization", "gpu_memory_utilization",
                             BEST_UTILIZATION)])
    if config.kv_cache_dtype == "auto":
        options.append([replace(_set("--kv-cache-dtype", "kv_cache_dtype", "fp8"),
                                caveat=FP8_KV_CAVEAT)])
    if not config.enable_prefix_caching and workload_facts.shares_prefixes:
        options.append([Change("--enable-prefix-caching", True, "enable_prefix_caching", True)])
    if config.num_gpu_blocks_override is not None:
        options.append([Change("--num-gpu-blocks-override", None, "num_gpu_blocks_override",
                               None)])
    return options + speculation_candidates(run)


def seats_the_pool_holds(run, workload_facts) -> Optional[int]:
    """As many seats as the KV pool holds requests of the workload's mean length (prompt and
    output), to a power of two; None if the run did not start. Seats far fewer than that leave
    the pool idle while requests wait (vLLM runs 1,024 on an H100, and Vultr's cookbook seats
    in the thousands for small models); far more admit requests the pool cannot hold, which
    come back preempted (the usual root cause of preemption under load, as "vLLM Preemption:
    Why 1 in 50 Requests Restarts From Scratch", dev.to, traces it)."""
    if run.finding is None or "kv_cache_tokens" not in run.finding.evidence:
        return None
    fits = run.finding.evidence["kv_cache_tokens"] / max(1.0, workload_facts.mean_request_tokens)
    return 2 ** max(0, int(math.log2(max(1.0, fits))))


def slo_budget(run) -> int:
    """The largest power-of-two budget whose full step (a prompt chunk beside the run's mean
    batch of decodes) the clock prices within the per-token SLO, so no chunk stalls a decode
    past it; at least max_num_seqs (vLLM's floor) and at most LARGEST_DEFAULT_BUDGET."""
    summary, config = run.summary, run.config
    clock = RooflineClock(config)
    num_decodes = max(1, round(summary["mean_batch_size"])) if summary else 1
    context = (round((summary["total_input_tokens"] + summary["total_output_tokens"] / 2)
                     / summary["completed"]) if summary else config.max_model_len // 2)
    tpot_slo_ms = run.finding.evidence.get("tpot_slo_ms", CHAT_SLOS_MS["tpot"])

    def step_ms(budget: int) -> float:
        chunk = max(1, budget - num_decodes)
        return 1000 * clock.price(chunk + num_decodes, num_decodes + 1,
                                  chunk * (chunk + 1) // 2 + num_decodes * (context + 1),
                                  num_decodes * context)

    budget = LARGEST_DEFAULT_BUDGET
    while budget > config.max_num_seqs and step_ms(budget) > tpot_slo_ms:
        budget //= 2
    return max(budget, config.max_num_seqs)


def speculation_candidates(run) -> list[list[Change]]:
    """Speculation off, or one draft more or fewer; on (EAGLE-3) where a head is published."""
    config = run.config
    speculative = config.speculative_config
    if speculative is None:
        if config.model not in EAGLE3_HEADS:
            return []
        return [[_speculative({"method": "eagle3", "model": EAGLE3_HEADS[config.model],
                               "num_speculative_tokens": NUM_DRAFTS})]]
    off = [Change("--speculative-config", None, "speculative_config", None)]
    if getattr(run.args, "spec_acceptance_rate", None) is not None:  # it needs speculation
        off.append(Change("--spec-acceptance-rate", None, "spec_acceptance_rate", None))
    options = [off]
    original = json.loads(run.args.speculative_config)
    for k in (speculative.num_speculative_tokens + 1, speculative.num_speculative_tokens - 1):
        if k >= 1:
            options.append([_speculative({**original, "num_speculative_tokens": k})])
    return options


def hardware_candidates(run) -> list[list[Change]]:
    """More GPUs, each way: twice the tensor parallelism (or the fewest GPUs with which vLLM
    starts), and twice the replicas (--data-parallel-size, a model's own copies); and as many
    bigger GPUs (`bigger_gpu`)."""
    if run.config is None:
        return []
    options = []
    if run.config.tensor_parallel_size < MAX_TENSOR_PARALLEL:
        options.append([more_tensor_parallel(run.config, run.chunked)])
    if not run.config.enable_expert_parallel:  # (with it, DP counts attention ranks)
        replicas = 2 * run.args.data_parallel_size
        options.append([_set("--data-parallel-size", "data_parallel_size", replicas)])
    bigger = bigger_gpu(run.config.gpu)
    if bigger is not None:
        options.append([_set("--gpu", "gpu", bigger)])
    return options


def bigger_gpu(gpu: str) -> Optional[str]:
    """The next GPU up from the same vendor (its software stack stays): the one with the least
    memory among those with at least BIGGER_MEMORY times as much and no less bandwidth or BF16
    compute. As many GPUs as now, each a bigger one."""
    current = GPUS[gpu]
    bigger = [(spec.memory_gib, key) for key, spec in GPUS.items()
              if spec.vendor == current.vendor
              and spec.memory_gib >= BIGGER_MEMORY * current.memory_gib
              and spec.memory_bandwidth_gbs >= current.memory_bandwidth_gbs
              and spec.bf16_tflops >= current.bf16_tflops]
    return min(bigger)[1] if bigger else None


def more_tensor_parallel(config: EngineConfig, chunked: bool) -> Change:
    """The fewest GPUs, a power of two up to one node's eight, with which vLLM would start;
    twice as many as now if it already starts."""
    tp = 2 * config.tensor_parallel_size
    while tp < MAX_TENSOR_PARALLEL and not starts(replace(config, tensor_parallel_size=tp),
                                                  chunked):
        tp *= 2
    return _set("--tensor-parallel-size", "tensor_parallel_size", min(tp, MAX_TENSOR_PARALLEL))


def starts(config: EngineConfig, chunked: bool) -> bool:
    try:
        plan_memory(config, chunked)
    except ConfigError:
        return False
    return True


def _set(flag: str, dest: str, value) -> Change:
    return Change(flag, value, dest, value)


def _speculative(document: dict) -> Change:
    text = json.dumps(document)
    return Change("--speculative-config", text, "speculative_config", text)
