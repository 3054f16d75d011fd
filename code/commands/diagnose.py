"""`diagnose`: which of the three defaults limits a serving config, and what to tune.

    read      the flags, as vLLM reads them: each one's default and what it sets   vllm_facts.py
    serve     the config on the workload (CONTINUOUS+CHUNKED, or CONTINUOUS with
              --no-enable-chunked-prefill); a config vLLM would refuse to start
              is a finding too (hbm_bound)
    classify  the run's counters into one bottleneck, with the counters that
              decided it                                                     bottleneck.py
    tune      a search over the knobs, each change served on the workload and
              judged on the SLO; more GPUs only if the SLO is still missed   tuning.py
    check     what vLLM refuses or accepts at start-up for these flags        vllm_facts.py
    compare   with --observed, what a real deployment measured               observed.py
              (first tokens much sooner than simulated: served again with the
              prefix cache warm, as a re-benchmarked server has it)          warm_cache.py
    show      one page, or --format json                                     reports/diagnosis.py

Two refusals come first, from the upstream skill this command follows: a
--gpu-memory-utilization below 0.7 (raise the ceiling before tuning the scheduler), and, with
--observed, an H100-class deployment under 100 output tok/s where the simulation serves more
(the slowness is outside vLLM).
"""

import argparse
import math
from dataclasses import dataclass
from typing import Optional

from commands import flags
from commands.bottleneck import (BUDGET_GAIN_PCT, FLOOR_RATIO, ITL_TAIL_RATIO, MEASURE_NEXT,
                                 PROMPT_TIME_PCT, RECOMPUTED_PCT, REPEATED_PREFIX_PCT,
                                 WAITING_SHARE_PCT, Finding, classify, evidence_of, physics,
                                 refused_finding)
from commands.observed import (AGREEMENT_BAND, compare, observed_meets_slo, read_observed,
                               refuse_slow_deployment, send_as_observed)
from commands.serving import require_completions
from commands.tuning import (IMPROVEMENT_PCT, MAX_RESIMULATIONS, MAX_ROUNDS,
                             SLO_ATTAINMENT_PCT, WORSENING_PCT, Search, search)
from commands.vllm_facts import (FOLLOWED, compatibility, config_read, memory_refusal,
                                 serve_defaults)
from commands.warm_cache import WarmPrefixCache, resent
from commands.workload_flags import add_workload_flags, workload_from_args, workload_kind
from config import ConfigError, EngineConfig
from goodput import CHAT_SLOS_MS, add_request_goodput, is_good
from gpu_memory import lookup, memory_layout
from kv_cache import PagedKVCache
from presets import GPUS
from reports.diagnosis import Diagnosis, diagnosis_json, diagnosis_page
from reports.tables import header_lines

MIN_UTILIZATION = 0.7  # the upstream skill's refusal: below it, raise the ceiling first


@dataclass(frozen=True)
class WorkloadFacts:
    """What the classes and the search's candidates need to know of the workload."""
    num_requests: int
    longest_request_tokens: int  # prompt + output of its longest request
    mean_request_tokens: float   # prompt + output, averaged over the requests
    repeated_prefix_pct: float   # prompt tokens in full blocks an earlier prompt began with
    shares_prefixes: bool        # that share is REPEATED_PREFIX_PCT or more


def workload_facts(workload, block_size: int) -> WorkloadFacts:
    """The longest and the mean request, and how much of the prompts an unbounded prefix cache
    would find: each prompt's leading full blocks (all but the last token, as vLLM looks up)
    whose chained hash an earlier prompt's blocks had."""
    hasher = PagedKVCache(1, block_size, enable_prefix_caching=True)
    seen, repeated, prompt_tokens, longest, num_requests, total = set(), 0, 0, 0, 0, 0
    for request in workload.make_requests():
        num_requests += 1
        longest = max(longest, request.prompt_len + request.max_tokens)
        total += request.prompt_len + request.max_tokens
        prompt_tokens += request.prompt_len
        hashes = hasher.block_hashes(request, (request.prompt_len - 1) // block_size)
        hits = 0
        while hits < len(hashes) and hashes[hits] in seen:
            hits += 1
        repeated += hits * block_size
        seen.update(hashes)
    share = 100 * repeated / prompt_tokens if prompt_tokens else 0.0
    return WorkloadFacts(num_requests, longest, total / max(1, num_requests), share,
                         share >= REPEATED_PREFIX_PCT)


@dataclass
class Evaluation:
    """One config served on the workload (or refused), and what its counters say."""
    args: argparse.Namespace
    config: Optional[EngineConfig]  # None: the flags could not even make a config
    chunked: bool
    finding: Optional[Finding]      # None: the flags could not make a config
    summary: Optional[dict]         # RunRecorder.summary() and goodput; None: it did not start
    refusal: Optional[str] = None   # why it did not start


class Evaluator:
    """Serves configs on one workload: the baseline, then each recommendation (tuning.py).
    `warm`: each run starts with the workload's prompts in the prefix cache (warm_cache.py)."""

    def __init__(self, context, workload, facts: WorkloadFacts, warm: bool = False):
        self.context = context
        self.workload = resent(workload) if warm else workload
        self.facts = facts
        self.warm = warm
        self.num_served = 0  # simulations run (a config that cannot start is not served)

    def baseline(self, args: argparse.Namespace) -> Evaluation:
        """The config the flags describe: a flag no engine could run with is an error; a config
        vLLM would refuse to start for lack of memory is a finding."""
        config, chunked, modes = self._config(args)
        flags.parse_goodput(args.goodput or list(flags.CHAT_GOODPUT))  # a bad SLO is an error too
        return self._serve(args, config, chunked, modes)

    def __call__(self, args: argparse.Namespace) -> Evaluation:
        """A recommendation's config: any refusal is what came of it."""
        chunked = args.enable_chunked_prefill is not False
        try:
            config, chunked, modes = self._config(args)
        except ConfigError as refusal:
            return Evaluation(args, None, chunked, None, None, str(refusal))
        return self._serve(args, config, chunked, modes)

    def slos_ms(self, args: argparse.Namespace) -> dict[str, float]:
        return flags.parse_goodput(args.goodput or list(flags.CHAT_GOODPUT))

    def _config(self, args):
        modes = flags.modes_from_args(args, ["chunked"])
        config, name = flags.config_from_args(args, self.context.knobs)
        modes[0].check(config, name)
        return config, modes[0].enable_chunked_prefill, modes

    def _serve(self, args, config, chunked, modes) -> Evaluation:
        try:
            engine = flags.engine_from_args(args, self.context, modes,
                                            default_goodput=flags.CHAT_GOODPUT)
        except ConfigError as refusal:  # the memory plan: what vLLM refuses at start-up
            return Evaluation(args, config, chunked, refused_finding(config, str(refusal)), None,
                              str(refusal))
        self.num_served += 1
        mode = WarmPrefixCache(modes[0], self.workload) if self.warm else modes[0]
        recorder = engine.serve(self.workload, mode,
                                label=f"diagnose run {self.num_served}, {modes[0].name}")
        require_completions(recorder)
        summary = add_request_goodput(recorder.summary(), recorder, engine.slos_ms)
        summary["good_requests"] = sum(1 for request in recorder.completed()
                                       if is_good(request, engine.slos_ms))
        tpot_slo_ms = engine.slos_ms.get("tpot", CHAT_SLOS_MS["tpot"])
        mean_prompt_len = summary["total_input_tokens"] / summary["completed"]
        evidence = evidence_of(summary, recorder, config,
                               physics(config, chunked, mean_prompt_len), tpot_slo_ms,
                               self.facts.repeated_prefix_pct)
        return Evaluation(args, config, chunked, classify(evidence), summary)


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "diagnose", help="the scheduler diagnosis: which default limits a config, what to tune",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION)
    flags.add_engine_flags(parser, knobs)
    add_workload_flags(parser)
    group = parser.add_argument_group("diagnosis")
    group.add_argument("--observed", default=None, metavar="FILE",
                       help="a `vllm bench serve --save-result` JSON of the real deployment: "
                            "its request_rate, burstiness, max_concurrency and num_prompts set "
                            "the workload where they apply; its latencies and throughputs are "
                            f"compared with the simulation (agreeing within |ln ratio| <= "
                            f"{AGREEMENT_BAND:g})")
    flags.add_format_flags(group, step_log=False)
    flags.add_chat_goodput_flag(parser)
    parser.flag_hints = {"--mode": "it serves CONTINUOUS+CHUNKED, or CONTINUOUS with "
                                   "--no-enable-chunked-prefill, as vLLM's V1 engine does"}
    # Left out, these take vLLM's defaults for the GPU (assume_vllm_defaults), not servesim's.
    parser.set_defaults(command=run_diagnose, mode=None, gpu_memory_utilization=None)


DESCRIPTION = f"""\
Serve the config (CONTINUOUS+CHUNKED; CONTINUOUS with --no-enable-chunked-prefill) and print one
page: each flag read (what it sets, vLLM 0.30.0's default); the bottleneck, one of hbm_bound,
hand_set_pool, kv_starvation, prefix_cache_off, batching_stall, chunk_missized,
speculation_overhead, decode_floor or none, with the counters that decided it; recommendations,
each served again; vLLM's start-up checks for these flags; what to measure next on the real
deployment.

The rules, in order; shares are of the busy time on the virtual clock:
  hbm_bound       vLLM would refuse to start for memory, or kv_starvation's signs while even
                  utilization 0.95 with FP8 KV holds less than the requests in flight need
  hand_set_pool   kv_starvation's signs with --num-gpu-blocks-override below what the
                  memory would hold
  kv_starvation   the longest wait (>= {WAITING_SHARE_PCT:g}%) is for free KV blocks, or preemptions
                  recomputed >= {RECOMPUTED_PCT:g}% of the computed tokens
  prefix_cache_off  prefix caching off while >= {REPEATED_PREFIX_PCT:g}% of the prompt tokens sit in
                  full blocks an earlier prompt began with
  batching_stall  the longest wait (>= {WAITING_SHARE_PCT:g}%) is on max_num_seqs, or on a budget
                  below the GEMM ridge that decodes alone spend
  chunk_missized  too small: >= {WAITING_SHARE_PCT:g}% of the time waited behind prompt chunks or
                  prompts took >= {PROMPT_TIME_PCT:g}% of it, and the budget is below the GEMM
                  ridge or twice it computes a prompt >= {BUDGET_GAIN_PCT:g}% faster per token;
                  too big: P99 ITL above the per-token SLO (--goodput tpot, default 100 ms)
                  and >= {ITL_TAIL_RATIO:g}x the median ITL
  speculation_overhead  speculation on while each step verifies more tokens (decodes x
                  (1 + k)) than the GEMM ridge
  decode_floor    median ITL within {FLOOR_RATIO:g}x of a one-sequence decode step, and no wait
                  reaching {WAITING_SHARE_PCT:g}%
  none            none of these: a healthy batch, or waits behind compute-bound steps only
GEMM ridge: the tokens whose linear-layer compute takes as long as streaming the weights once.

Flags left out take vLLM {FOLLOWED}'s defaults for the GPU (the budget, the seats, utilization
0.92), as `vllm serve` would; the page says which. The recommendations are a search, judged on
the --goodput SLO: every scheduler and cache knob, both ways, served on top of the changes kept
before it, in up to {MAX_ROUNDS} rounds; a change is kept if {IMPROVEMENT_PCT:g}% more of the requests
meet every SLO, or, at equal goodput, if the bottleneck's metric (mean E2EL, mean TTFT, P99 ITL
or mean TPOT) falls {IMPROVEMENT_PCT:g}% or more and no headline metric worsens more than {WORSENING_PCT:g}%.
More GPUs (TP, replicas) or bigger ones only while fewer than {SLO_ATTAINMENT_PCT:g}% of the requests
meet the SLO.
With --observed, advice only where the deployment as measured misses the SLO; first tokens much
sooner than simulated are served again with the prefix cache warm (the prompts a re-run of
vllm bench serve sends again, left cached by the run before), and the run the observation
matches better is the one tuned.
At most {MAX_RESIMULATIONS + 3} simulations in all (one more with --observed when the prefix
cache was warm): give it a workload of tens to hundreds of requests. Refused:
--gpu-memory-utilization below {MIN_UTILIZATION:g}; with --observed, an H100-class GPU measured under
100 output tok/s where the simulation serves more. The skill behind it:
outputs/skill-vllm-scheduler-reader.md."""


def run_diagnose(args: argparse.Namespace, context) -> str:
    diagnosis = diagnose(args, context)
    if args.format == "json":
        return diagnosis_json(diagnosis)
    return "\n".join(diagnosis_page(diagnosis))


def diagnose(args: argparse.Namespace, context) -> Diagnosis:
    """Read, serve, classify, tune, check and compare: every input checked first."""
    observed = read_observed(args.observed) if args.observed else None
    sent = send_as_observed(observed, args, workload_kind(args) == "trace") if observed else []
    assumed = assume_vllm_defaults(args)
    config, name = flags.config_from_args(args, context.knobs)
    refuse_to_tune(config)
    modes = flags.modes_from_args(args, ["chunked"])  # every flag checked before the workload
    modes[0].check(config, name)                     # is drawn (which may announce a long run)
    flags.parse_goodput(args.goodput or list(flags.CHAT_GOODPUT))
    workload = workload_from_args(args, config, modes)
    facts = workload_facts(workload, config.block_size)
    evaluator = Evaluator(context, workload, facts)
    baseline = evaluator.baseline(args)
    comparison = None
    if observed is not None:
        if baseline.summary is not None:
            refuse_slow_deployment(observed, baseline.summary, lookup(baseline.config)[1])
        comparison = compare(observed, baseline.summary,
                             baseline.finding.evidence.get("decode_floor_ms", 0.0))
    meets = (observed_meets_slo(observed, evaluator.slos_ms(args), SLO_ATTAINMENT_PCT)
             if observed is not None else None)
    warm = None
    if comparison is not None and wants_a_warm_run(comparison, baseline):
        warm = serve_warm(args, context, workload, facts, observed, comparison)
    tuned, tuner = (warm.baseline, warm.evaluator) if warm and warm.tuned else (baseline,
                                                                              evaluator)
    found = (Search([], [], tuned, []) if meets else search(tuned, tuner, facts))
    model, gpu = lookup(baseline.config)
    refused = [memory_refusal(baseline.refusal)] if baseline.refusal else []
    return Diagnosis(
        header=header_lines(baseline.config, memory_layout(baseline.config), model.name,
                            gpu.name, workload),
        sent=sent, assumed=assumed, num_requests=facts.num_requests, observed_meets_slo=meets,
        baseline=baseline, kept=found.kept, rejected=found.rejected,
        final=found.final, hardware=found.hardware,
        num_runs=evaluator.num_served + (warm.evaluator.num_served if warm else 0),
        config_read=config_read(baseline.config, baseline.chunked, gpu),
        compatibility=refused + compatibility(baseline.config, baseline.chunked),
        measure_next=MEASURE_NEXT[baseline.finding.bottleneck],
        improvement_pct=IMPROVEMENT_PCT, vllm_version=FOLLOWED,
        observed=observed, comparison=comparison, warm=warm)


@dataclass
class WarmRun:
    """The workload served again with its prompts already in the prefix cache, and whether the
    observation matches it better than the cold run (then the search tunes it)."""
    evaluator: Evaluator
    baseline: Evaluation
    comparison: dict      # observed.compare, against this run
    tuned: bool


def wants_a_warm_run(comparison: dict, baseline: Evaluation) -> bool:
    """First tokens much sooner than simulated, on a config that caches prefixes."""
    return (comparison["first_token_sooner"] and baseline.config is not None
            and baseline.config.enable_prefix_caching and baseline.summary is not None)


def serve_warm(args, context, workload, facts: WorkloadFacts, observed: dict,
               cold: dict) -> WarmRun:
    evaluator = Evaluator(context, workload, facts, warm=True)
    baseline = evaluator.baseline(args)
    comparison = compare(observed, baseline.summary,
                         baseline.finding.evidence.get("decode_floor_ms", 0.0))
    return WarmRun(evaluator, baseline, comparison,
                   tuned=mean_disagreement(comparison) < mean_disagreement(cold))


def mean_disagreement(comparison: dict) -> float:
    """Mean |ln(observed / simulated)| over the figures compared."""
    figures = comparison["figures"]
    return sum(abs(math.log(f["ratio"])) for f in figures) / len(figures) if figures else 0.0


def assume_vllm_defaults(args: argparse.Namespace) -> list[str]:
    """A deployment is diagnosed as `vllm serve` runs it: each scheduler and memory flag left
    out takes vLLM 0.30.0's value for the GPU (not the lesson's knobs, which `run` and
    `compare` keep). Sets them in `args`; returns them as typed, for the page to say."""
    if args.gpu not in GPUS:
        return []  # config_from_args names the bad --gpu
    chunked = args.enable_chunked_prefill is not False
    max_model_len = args.max_model_len or flags.model_max_model_len(args.model)
    assumed = []
    for dest, value in serve_defaults(GPUS[args.gpu], chunked, max_model_len).items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
            assumed.append(f"--{dest.replace('_', '-')} {value:g}")
    return assumed


def refuse_to_tune(config: EngineConfig) -> None:
    """The upstream skill's first refusal, and a clock the diagnosis cannot read."""
    if config.gpu_memory_utilization < MIN_UTILIZATION:
        raise ConfigError(
            f"--gpu-memory-utilization {config.gpu_memory_utilization:g} is below "
            f"{MIN_UTILIZATION:g}: raise the ceiling before tuning the scheduler (vLLM 0.30.0's "
            "default is 0.92, v0.18.0's 0.9); diagnose refuses to read a pool that small")
    if config.forward_model != "roofline":
        raise ConfigError("diagnose reads the roofline clock (its decode floor and GEMM ridge); "
                          "leave out --forward-model linear")
