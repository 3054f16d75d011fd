"""Which of the three defaults limits a serving config, read off the counters of its simulation.

The lesson's three defaults each fail in their own way, and each failure leaves its own trace in
the counters `metrics.RunRecorder` keeps; the physics the clock and the memory plan know
(forward_model.py, gpu_memory.py) says whether a larger knob could help at all:

    bottleneck       the trace it leaves                                   what limits
    hbm_bound        vLLM would refuse to start (the weights or one          the GPU's memory
                     max_model_len sequence do not fit), or the KV starves
                     and even the most one GPU can give the KV (utilization
                     0.95, FP8 KV) holds less than the requests in flight
                     need
    kv_starvation    requests wait because the free blocks cannot hold the   PagedAttention's pool
                     next one, or preemptions recompute what was thrown away  (a knob can grow it)
    batching_stall   requests wait because max_num_seqs requests run, or     continuous batching's
                     because decodes alone spend a token budget so small      caps
                     that its step only streams the weights (below the GEMM
                     ridge), with KV to spare
    chunk_missized   too small: a budget below the GEMM ridge while prompts  chunked prefill's
                     take much of the time (prefill at the memory-bound       chunk size
                     rate, TTFT long); too big: the ITL tail is a prompt's
                     step (P99 ITL above the per-token SLO and twice the
                     median)
    decode_floor     the median ITL sits at a one-sequence decode step: the  the weight stream,
                     scheduler is not the limit                             the hardware's floor
    none             none of the above (a light load; or requests wait only
                     behind compute-bound steps: the GPU's compute is full)

and three that name a flag rather than a default, each read the same way:

    hand_set_pool    kv_starvation's trace, with --num-gpu-blocks-override   the override, not
                     holding fewer tokens than the memory would               the GPU
    prefix_cache_off prefix caching off while the prompts repeat earlier      a cache left off
                     prompts' leading blocks (REPEATED_PREFIX_PCT)
    speculation_overhead  speculation on while each step verifies more        drafts at a load
                     tokens (decodes x (1 + k)) than the GEMM ridge           that pays for them

The rules run in that order, and among the reasons requests waited, the one they waited on
longest decides (a cause counts from WAITING_SHARE_PCT of the busy time). A token budget
counts as a cap below the GEMM ridge: there a step that fills it still costs about one stream
of the weights, so a larger budget adds work for free. Above it every token costs its own
compute, but each step's fixed costs (per step and per layer) are still shared by its tokens,
so a larger budget keeps buying prefill speed, less and less (chunk_missized says by how much:
`prefill_gain_2x_pct`); the search in tuning.py serves it to see.
"""

from dataclasses import dataclass, replace
from typing import Optional

from config import EngineConfig
from forward_model import RooflineClock
from gpu_memory import memory_layout
from engine_counters import WAITING_CAUSES
from metrics import peak_concurrent_requests

# The thresholds, stated once: `diagnose --help` prints them from here (and the skill file pastes
# that).
WAITING_SHARE_PCT = 25.0  # a cause of waiting counts once requests waited on it this share of
#                           the busy time (a quarter: a bottleneck, not a passing burst)
RECOMPUTED_PCT = 5.0      # preemptions thrash once this share of computed tokens is recomputed
ITL_TAIL_RATIO = 2.0      # a prompt's step is the ITL tail once P99 ITL is this many medians ...
#                           ... and above the per-token SLO (--goodput tpot, else 100 ms)
FLOOR_RATIO = 1.25        # the median ITL is at the decode floor within this factor
PROMPT_TIME_PCT = 25.0    # prompts weigh once steps computing them take this share of busy time
BEST_UTILIZATION = 0.95   # the most --gpu-memory-utilization commonly given (the lesson's setup)
BUDGET_GAIN_PCT = 10.0    # a budget is too small while twice it computes a prompt this much
#                           faster per token (the step's fixed costs shared by more tokens)
REPEATED_PREFIX_PCT = 20.0  # prompts share prefixes once this share of their tokens sits in
#                             full blocks an earlier prompt began with

BOTTLENECKS = ("hbm_bound", "hand_set_pool", "kv_starvation", "prefix_cache_off",
               "batching_stall", "chunk_missized", "speculation_overhead", "decode_floor", "none")
# What each bottleneck costs a request, as `vllm bench serve` names it: its recommendations are
# judged by it, before and after (every one is a latency: lower is better).
E2EL, TTFT, TPOT, P99_ITL = "mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms", "p99_itl_ms"


@dataclass(frozen=True)
class Physics:
    """What the clock and the memory plan say about a config, beside its counters."""
    decode_floor_ms: float       # one sequence's decode step: every weight streamed once
    gemm_ridge_tokens: float     # tokens whose GEMM compute takes as long as that stream
    token_budget: int            # max_num_batched_tokens as the scheduler runs it
    kv_cache_tokens: int
    best_kv_cache_tokens: int    # at utilization >= 0.95, FP8 KV, the pool sized from memory
    sized_kv_cache_tokens: int   # the pool sized from memory at these flags, an override aside
    prefill_gain_2x_pct: float   # how much faster per token a chunk of twice the budget computes


def physics(config: EngineConfig, chunked: bool, mean_prompt_len: float) -> Physics:
    clock = RooflineClock(config)  # the target's own, drafting aside
    best = replace(config, gpu_memory_utilization=max(config.gpu_memory_utilization,
                                                      BEST_UTILIZATION),
                   kv_cache_dtype="fp8", num_gpu_blocks_override=None)
    budget = config.token_budget(chunked)
    return Physics(
        decode_floor_ms=1000 * clock.decode_step_time_s(1, round(mean_prompt_len)),
        gemm_ridge_tokens=clock.weight_stream_s / clock.gemm_s_per_token,
        token_budget=budget,
        kv_cache_tokens=memory_layout(config, chunked).kv_cache_tokens,
        best_kv_cache_tokens=memory_layout(best, chunked).kv_cache_tokens,
        sized_kv_cache_tokens=memory_layout(replace(config, num_gpu_blocks_override=None),
                                            chunked).kv_cache_tokens,
        prefill_gain_2x_pct=100 * (prefill_rate(clock, 2 * budget) / prefill_rate(clock, budget)
                                   - 1))


def prefill_rate(clock: RooflineClock, chunk: int) -> float:
    """Prompt tokens a second in steps computing one chunk of `chunk` tokens and nothing else:
    below the GEMM ridge each step costs about a weight stream, and above it the per-step and
    per-layer fixed costs are shared by more tokens, so the rate keeps rising with the chunk.
    Attention is left out: a prompt needs the same attention however it is sliced."""
    return chunk / clock.price(chunk, 1, 0, 0)


@dataclass(frozen=True)
class Finding:
    """A bottleneck, the counters it read, and the rule that named it (one sentence)."""
    bottleneck: str
    kind: str              # which way: e.g. chunk_missized "too_big" or "too_small"
    metric: Optional[str]  # what its recommendations are judged by; None: nothing to tune
    evidence: dict         # counter -> value, as the JSON and the page print them
    reason: str

    def as_json(self) -> dict:
        units = REFUSED_UNITS if self.kind == "refused" else EVIDENCE_UNITS
        return {"bottleneck": self.bottleneck, "kind": self.kind, "reason": self.reason,
                "evidence": self.evidence, "evidence_units": units, "metric": self.metric}


# The counters a finding shows, in this order, with their units.
EVIDENCE_UNITS = {
    "waiting_on_kv_blocks_pct": "% of busy time", "waiting_on_max_num_seqs_pct": "% of busy time",
    "waiting_on_decode_budget_pct": "% of busy time",
    "waiting_on_prompt_budget_pct": "% of busy time", "mean_num_waiting": "requests",
    "peak_num_waiting": "requests", "num_preemptions": "events",
    "recomputed_pct": "% of computed tokens", "peak_kv_usage_pct": "% of the pool",
    "mean_kv_usage_pct": "% of the pool", "kv_cache_tokens": "tokens",
    "kv_demand_tokens": "tokens", "best_kv_cache_tokens": "tokens",
    "max_num_seqs": "requests", "mean_batch_size": "requests per step",
    "max_num_batched_tokens": "tokens", "gemm_ridge_tokens": "tokens",
    "prompt_time_pct": "% of busy time", "decodes_beside_prompts_pct": "% of decode tokens",
    "median_itl_ms": "ms", "p99_itl_ms": "ms", "tpot_slo_ms": "ms", "decode_floor_ms": "ms",
    "mean_ttft_ms": "ms", "mean_queue_ms": "ms",
    "num_gpu_blocks_override": "blocks (0: sized from memory)",
    "sized_kv_cache_tokens": "tokens", "prefill_gain_2x_pct": "% faster per prompt token",
    "prefix_caching": "1 on, 0 off", "repeated_prefix_pct": "% of prompt tokens",
    "num_speculative_tokens": "drafts per step", "verify_tokens_per_step": "tokens",
}
# ... and those of a config vLLM would refuse, from its memory plan.
REFUSED_UNITS = {"usable_gib": "GiB per GPU", "weights_gib": "GiB per GPU",
                 "activation_reserve_gib": "GiB per GPU", "kv_cache_tokens": "tokens",
                 "max_model_len": "tokens"}


def evidence_of(summary: dict, recorder, config: EngineConfig, phys: Physics,
                tpot_slo_ms: float, repeated_prefix_pct: float) -> dict:
    """The counters of a simulated run (summary: RunRecorder.summary) beside the physics and
    the workload's shared prefixes (diagnose.repeated_prefix_pct)."""
    completed = summary["completed"]
    mean_sequence = (summary["total_input_tokens"] + summary["total_output_tokens"]) / completed
    in_flight = min(peak_concurrent_requests(recorder.iter_completed()), config.max_num_seqs)
    speculative = config.speculative_config
    num_drafts = speculative.num_speculative_tokens if speculative else 0
    derived = {"kv_cache_tokens": phys.kv_cache_tokens,
               "kv_demand_tokens": round(in_flight * mean_sequence),
               "best_kv_cache_tokens": phys.best_kv_cache_tokens,
               "max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": phys.token_budget,
               "gemm_ridge_tokens": round(phys.gemm_ridge_tokens), "tpot_slo_ms": tpot_slo_ms,
               "decode_floor_ms": phys.decode_floor_ms,
               "num_gpu_blocks_override": config.num_gpu_blocks_override or 0,
               "sized_kv_cache_tokens": phys.sized_kv_cache_tokens,
               "prefill_gain_2x_pct": phys.prefill_gain_2x_pct,
               "prefix_caching": int(config.enable_prefix_caching),
               "repeated_prefix_pct": repeated_prefix_pct,
               "num_speculative_tokens": num_drafts,
               "verify_tokens_per_step": round(summary["mean_batch_size"] * (1 + num_drafts))}
    return {key: derived[key] if key in derived else summary[key] for key in EVIDENCE_UNITS}


def classify(evidence: dict) -> Finding:
    """The bottleneck of a run that started: the first rule that holds, in the module
    docstring's order."""
    for rule in (_kv_starved, _prefixes_recomputed, _batch_capped, _chunk_too_small,
                 _drafts_too_costly, _chunk_too_big, _at_the_floor):
        finding = rule(evidence)
        if finding is not None:
            return finding
    return _nothing_in_the_way(evidence)


def below_ridge(e: dict) -> bool:
    """A budget whose full step still costs about one stream of the weights."""
    return e["max_num_batched_tokens"] < e["gemm_ridge_tokens"]


def longest_wait(e: dict) -> Optional[str]:
    """What requests waited on longest, if that was WAITING_SHARE_PCT of the busy time or more:
    the free blocks, max_num_seqs, or a budget below the GEMM ridge spent by decodes alone or
    by prompts (above the ridge a spent budget is compute-bound work, not a cap)."""
    causes = {"kv_blocks": e["waiting_on_kv_blocks_pct"],
              "max_num_seqs": e["waiting_on_max_num_seqs_pct"]}
    if below_ridge(e):
        causes["decode_budget"] = e["waiting_on_decode_budget_pct"]
        causes["prompt_budget"] = e["waiting_on_prompt_budget_pct"]
    cause = max(causes, key=causes.get)
    return cause if causes[cause] >= WAITING_SHARE_PCT else None


def _kv_starved(e: dict) -> Optional[Finding]:
    """PagedAttention's pool is short: the longest wait is for free blocks, or preemptions
    thrash. hbm_bound if not even the most one GPU can give holds the requests in flight."""
    if longest_wait(e) != "kv_blocks" and e["recomputed_pct"] < RECOMPUTED_PCT:
        return None
    what = (f"requests waited {e['waiting_on_kv_blocks_pct']:.1f}% of the busy time for free "
            f"blocks, {e['num_preemptions']} preemptions recomputed {e['recomputed_pct']:.1f}% "
            f"of the computed tokens, KV use peaked at {e['peak_kv_usage_pct']:.0f}%")
    if e["num_gpu_blocks_override"] and e["sized_kv_cache_tokens"] > e["kv_cache_tokens"]:
        return Finding("hand_set_pool", "override", E2EL, e,
                       f"{what}; --num-gpu-blocks-override {e['num_gpu_blocks_override']} holds "
                       f"{e['kv_cache_tokens']:,} tokens where the memory left after the weights "
                       f"would hold {e['sized_kv_cache_tokens']:,}: the pool was set by hand, not "
                       "limited by the GPU")
    if e["best_kv_cache_tokens"] < e["kv_demand_tokens"]:
        return Finding("hbm_bound", "demand", E2EL, e,
                       f"{what}; even at utilization {BEST_UTILIZATION} with FP8 KV one GPU "
                       f"holds {e['best_kv_cache_tokens']:,} tokens, less than the "
                       f"{e['kv_demand_tokens']:,} the requests in flight need")
    return Finding("kv_starvation", "pool", E2EL, e,
                   f"{what}; the pool holds {e['kv_cache_tokens']:,} tokens where the requests "
                   f"in flight need {e['kv_demand_tokens']:,}, and the GPU could give it "
                   f"{e['best_kv_cache_tokens']:,}")


def _batch_capped(e: dict) -> Optional[Finding]:
    """Continuous batching's caps: the seats, or a budget decodes alone spend below the ridge."""
    cause = longest_wait(e)
    if cause == "max_num_seqs":
        return Finding("batching_stall", "max_num_seqs", TTFT, e,
                       f"requests waited {e['waiting_on_max_num_seqs_pct']:.1f}% of the busy "
                       f"time because max_num_seqs ({e['max_num_seqs']}) requests already ran, "
                       f"while the KV cache was at most {e['peak_kv_usage_pct']:.0f}% used")
    if cause == "decode_budget":
        return Finding("batching_stall", "decode_budget", TTFT, e,
                       f"requests waited {e['waiting_on_decode_budget_pct']:.1f}% of the busy "
                       f"time because decodes alone spent the {e['max_num_batched_tokens']}-token "
                       f"budget, below the GEMM ridge ({e['gemm_ridge_tokens']} tokens): its "
                       "steps only stream the weights")
    return None


def _chunk_too_small(e: dict) -> Optional[Finding]:
    """Prompts weigh and the budget is small for them: below the ridge a chunk costs about a
    weight stream; above it, twice the budget still computes a prompt BUDGET_GAIN_PCT faster
    per token, because each step's fixed costs are shared by more tokens."""
    weighs = (e["waiting_on_prompt_budget_pct"] >= WAITING_SHARE_PCT
              or e["prompt_time_pct"] >= PROMPT_TIME_PCT)
    if not weighs:
        return None
    where = (f"the {e['max_num_batched_tokens']}-token budget is below the GEMM ridge "
             f"({e['gemm_ridge_tokens']} tokens), so each prompt chunk costs about a stream of "
             "the weights" if below_ridge(e) else
             f"a chunk of twice the {e['max_num_batched_tokens']}-token budget computes a prompt "
             f"{e['prefill_gain_2x_pct']:.0f}% faster per token (each step's fixed costs shared "
             "by more tokens)")
    if not below_ridge(e) and e["prefill_gain_2x_pct"] < BUDGET_GAIN_PCT:
        return None
    return Finding("chunk_missized", "too_small", TTFT, e,
                   f"{where}, while steps computing prompts took {e['prompt_time_pct']:.0f}% of "
                   f"the busy time (requests waited {e['waiting_on_prompt_budget_pct']:.0f}% of "
                   "it behind them)")


def _chunk_too_big(e: dict) -> Optional[Finding]:
    """The ITL tail is a prompt's step: above the per-token SLO, and a multiple of the median."""
    tail, median = e["p99_itl_ms"], e["median_itl_ms"]
    if not (tail > e["tpot_slo_ms"] and tail >= ITL_TAIL_RATIO * median):
        return None
    return Finding("chunk_missized", "too_big", P99_ITL, e,
                   f"P99 ITL {tail:,.1f} ms is {tail / median:.1f}x the median ({median:.1f} ms) "
                   f"and above the per-token SLO ({e['tpot_slo_ms']:g} ms): the slow gaps are "
                   f"steps that computed a prompt beside the decodes "
                   f"({e['decodes_beside_prompts_pct']:.0f}% of decode tokens were)")


def _prefixes_recomputed(e: dict) -> Optional[Finding]:
    """Prefix caching off while the prompts repeat each other's leading blocks."""
    if e["prefix_caching"] or e["repeated_prefix_pct"] < REPEATED_PREFIX_PCT:
        return None
    return Finding("prefix_cache_off", "shared_prefixes", TTFT, e,
                   f"prefix caching is off, yet {e['repeated_prefix_pct']:.0f}% of the prompt "
                   "tokens sit in full blocks an earlier prompt began with: every one of them is "
                   "computed again")


def _drafts_too_costly(e: dict) -> Optional[Finding]:
    """Speculation at a load where verifying the drafts is compute-bound work."""
    if not e["num_speculative_tokens"] or e["verify_tokens_per_step"] < e["gemm_ridge_tokens"]:
        return None
    return Finding("speculation_overhead", "compute_bound", TPOT, e,
                   f"each step verifies about {e['verify_tokens_per_step']} tokens ("
                   f"{e['mean_batch_size']:.0f} decodes x (1 + {e['num_speculative_tokens']} "
                   f"drafts)), above the GEMM ridge ({e['gemm_ridge_tokens']} tokens): drafts "
                   "no longer ride on the weight stream for free, and every rejected one is "
                   "compute spent for nothing")


def waited(e: dict) -> bool:
    """Did requests wait WAITING_SHARE_PCT of the busy time or more, on anything?"""
    return max(e[f"waiting_on_{cause}_pct"] for cause in WAITING_CAUSES) >= WAITING_SHARE_PCT


def _at_the_floor(e: dict) -> Optional[Finding]:
    if waited(e) or e["median_itl_ms"] > FLOOR_RATIO * e["decode_floor_ms"]:
        return None
    return Finding("decode_floor", "bandwidth", TPOT, e,
                   f"the median ITL, {e['median_itl_ms']:.1f} ms, is within {FLOOR_RATIO:g}x of "
                   f"one sequence's decode step ({e['decode_floor_ms']:.1f} ms: every weight "
                   f"streamed once), and no cause of waiting reached {WAITING_SHARE_PCT:g}% of "
                   "the busy time: the scheduler is not the limit")


def _nothing_in_the_way(e: dict) -> Finding:
    if waited(e):
        return Finding("none", "compute_bound", TTFT, e,
                       "requests waited, but only behind steps the token budget filled above the "
                       f"GEMM ridge ({e['gemm_ridge_tokens']} tokens): compute-bound work, where "
                       "a larger budget shares only each step's fixed costs (twice it computes a "
                       f"prompt {e['prefill_gain_2x_pct']:.0f}% faster per token); the GPU's "
                       "compute is the limit")
    return Finding("none", "healthy", None, e,
                   f"no cause of waiting reached {WAITING_SHARE_PCT:g}% of the busy time, no "
                   "preemption thrashed, the ITL tail stays within the per-token SLO and the "
                   f"median ITL ({e['median_itl_ms']:.1f} ms) is above the decode floor "
                   f"({e['decode_floor_ms']:.1f} ms): the batch shares each weight stream")


def refused_finding(config: EngineConfig, refusal: str) -> Finding:
    """vLLM would refuse to start: the memory plan's own line, beside its numbers."""
    layout = memory_layout(config)
    gib = 2 ** 30
    evidence = {"usable_gib": layout.usable_bytes / gib, "weights_gib": layout.weight_bytes / gib,
                "activation_reserve_gib": layout.activation_reserve_bytes / gib,
                "kv_cache_tokens": layout.kv_cache_tokens, "max_model_len": config.max_model_len}
    return Finding("hbm_bound", "refused", E2EL, evidence,
                   f"vLLM would refuse to start: {refusal}")



# What to measure next on the real deployment, by bottleneck: the one figure that would confirm
# it there (vLLM 0.30.0's Prometheus names, v1/metrics/loggers.py; its start-up log line from
# v1/core/kv_cache_utils.py).
MEASURE_NEXT = {
    "hbm_bound": "block allocation rate: how fast vllm:kv_cache_usage_perc climbs to 1 under the "
                 "real traffic, against the 'GPU KV cache size: N tokens' vLLM logs at start-up",
    "kv_starvation": "preemptions: the counter vllm:num_preemptions (and vllm:kv_cache_usage_perc "
                     "at 1 beside it); a count that climbs with the load is the pool running out",
    "batching_stall": "WAITING queue depth: vllm:num_requests_waiting while "
                      "vllm:num_requests_running sits at max_num_seqs",
    "chunk_missized": "P99 ITL: vllm bench serve's p99_itl_ms (or the tail of "
                      "vllm:inter_token_latency_seconds), with and without long prompts in the "
                      "traffic",
    "decode_floor": "P99 ITL against the decode floor: vllm bench serve's p99_itl_ms; near the "
                    "floor the scheduler is not the limit, far above it the host is",
    "none": "WAITING queue depth: vllm:num_requests_waiting as the load grows; where it starts "
            "to climb is the deployment's capacity",
    "hand_set_pool": "the 'GPU KV cache size: N tokens' vLLM logs at start-up with and without "
                     "--num-gpu-blocks-override, and vllm:num_preemptions under the real traffic",
    "prefix_cache_off": "prefix cache hits: vllm:prefix_cache_hits over vllm:prefix_cache_queries "
                        "once --enable-prefix-caching is on, on the real prompts",
    "speculation_overhead": "acceptance under load: vllm:spec_decode_num_accepted_tokens over "
                            "vllm:spec_decode_num_draft_tokens, and TPOT with speculation on and "
                            "off at the real request rate",
}
