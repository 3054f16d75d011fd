"""`diagnose`: which of the three defaults limits a serving config, and what to tune.

    read      the flags, as vLLM reads them: each one's default and what it sets   vllm_facts.py
    serve     the config on the workload (CONTINUOUS+CHUNKED, or CONTINUOUS with
              --no-enable-chunked-prefill); a config vLLM would refuse to start
              is a finding too (hbm_bound)
    classify  the run's counters into one bottleneck, with the counters that
              decided it                                                     bottleneck.py
    tune      each recommendation served again on top of the ones before it   tuning.py
    check     what vLLM refuses or accepts at start-up for these flags        vllm_facts.py
    compare   with --observed, what a real deployment measured               observed.py
    show      one page, or --format json                                     reports/diagnosis.py

Two refusals come first, from the upstream skill this command follows: a
--gpu-memory-utilization below 0.7 (raise the ceiling before tuning the scheduler), and, with
--observed, an H100-class deployment under 100 output tok/s where the simulation serves more
(the slowness is outside vLLM).
"""

import argparse
from dataclasses import dataclass
from typing import Optional

from commands import flags
from commands.bottleneck import (FLOOR_RATIO, ITL_TAIL_RATIO, MEASURE_NEXT, PROMPT_TIME_PCT,
                                 RECOMPUTED_PCT, WAITING_SHARE_PCT, Finding, classify,
                                 evidence_of, physics, refused_finding)
from commands.observed import (AGREEMENT_BAND, compare, read_observed, refuse_slow_deployment,
                               send_as_observed)
from commands.serving import require_completions
from commands.tuning import IMPROVEMENT_PCT, MAX_RESIMULATIONS, recommend
from commands.vllm_facts import FOLLOWED, compatibility, config_read, memory_refusal
from commands.workload_flags import add_workload_flags, workload_from_args, workload_kind
from config import ConfigError, EngineConfig
from goodput import CHAT_SLOS_MS, add_request_goodput
from gpu_memory import lookup, memory_layout
from reports.diagnosis import Diagnosis, diagnosis_json, diagnosis_page
from reports.tables import header_lines

MIN_UTILIZATION = 0.7  # the upstream skill's refusal: below it, raise the ceiling first


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
    """Serves configs on one workload: the baseline, then each recommendation (tuning.py)."""

    def __init__(self, context, workload):
        self.context = context
        self.workload = workload
        self.num_served = 0  # runs so far, for the progress line

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
        recorder = engine.serve(self.workload, modes[0],
                                label=f"diagnose run {self.num_served}, {modes[0].name}")
        require_completions(recorder)
        summary = add_request_goodput(recorder.summary(), recorder, engine.slos_ms)
        tpot_slo_ms = engine.slos_ms.get("tpot", CHAT_SLOS_MS["tpot"])
        mean_prompt_len = summary["total_input_tokens"] / summary["completed"]
        evidence = evidence_of(summary, recorder, config,
                               physics(config, chunked, mean_prompt_len), tpot_slo_ms)
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
    parser.set_defaults(command=run_diagnose, mode=None)


DESCRIPTION = f"""\
Serve the config (CONTINUOUS+CHUNKED; CONTINUOUS with --no-enable-chunked-prefill) and print one
page: each flag read (what it sets, vLLM 0.30.0's default); the bottleneck, one of hbm_bound,
kv_starvation, batching_stall, chunk_missized, decode_floor or none, with the counters that
decided it; recommendations, each served again; vLLM's start-up checks for these flags; what to
measure next on the real deployment.

The rules, in order; shares are of the busy time on the virtual clock:
  hbm_bound       vLLM would refuse to start for memory, or kv_starvation's signs while even
                  utilization 0.95 with FP8 KV holds less than the requests in flight need
  kv_starvation   the longest wait (>= {WAITING_SHARE_PCT:g}%) is for free KV blocks, or preemptions
                  recomputed >= {RECOMPUTED_PCT:g}% of the computed tokens
  batching_stall  the longest wait (>= {WAITING_SHARE_PCT:g}%) is on max_num_seqs, or on a budget
                  below the GEMM ridge that decodes alone spend
  chunk_missized  too small: a budget below the GEMM ridge while the longest wait (>= {WAITING_SHARE_PCT:g}%)
                  is behind its prompt chunks or prompts take >= {PROMPT_TIME_PCT:g}% of the time;
                  too big: P99 ITL above the per-token SLO (--goodput tpot, default 100 ms)
                  and >= {ITL_TAIL_RATIO:g}x the median ITL
  decode_floor    median ITL within {FLOOR_RATIO:g}x of a one-sequence decode step, and no wait
                  reaching {WAITING_SHARE_PCT:g}%
  none            none of these: a healthy batch, or waits behind compute-bound steps only
GEMM ridge: the tokens whose linear-layer compute takes as long as streaming the weights once.

Each recommendation is served again on top of those kept before it, and kept if its
bottleneck's metric (mean E2EL, mean TTFT, P99 ITL or mean TPOT) falls by >= {IMPROVEMENT_PCT:g}%;
scheduler knobs come first, more GPUs last. At most {MAX_RESIMULATIONS + 1} simulations in all:
give it a workload of tens to hundreds of requests. Refused: --gpu-memory-utilization below
{MIN_UTILIZATION:g}; with --observed, an H100-class GPU measured under 100 output tok/s where the
simulation serves more. The skill behind it: outputs/skill-vllm-scheduler-reader.md."""


def run_diagnose(args: argparse.Namespace, context) -> str:
    diagnosis = diagnose(args, context)
    if args.format == "json":
        return diagnosis_json(diagnosis)
    return "\n".join(diagnosis_page(diagnosis))


def diagnose(args: argparse.Namespace, context) -> Diagnosis:
    """Read, serve, classify, tune, check and compare: every input checked first."""
    observed = read_observed(args.observed) if args.observed else None
    sent = send_as_observed(observed, args, workload_kind(args) == "trace") if observed else []
    config, name = flags.config_from_args(args, context.knobs)
    refuse_to_tune(config)
    modes = flags.modes_from_args(args, ["chunked"])  # every flag checked before the workload
    modes[0].check(config, name)                     # is drawn (which may announce a long run)
    flags.parse_goodput(args.goodput or list(flags.CHAT_GOODPUT))
    workload = workload_from_args(args, config, modes)
    evaluator = Evaluator(context, workload)
    baseline = evaluator.baseline(args)
    comparison = None
    if observed is not None:
        if baseline.summary is not None:
            refuse_slow_deployment(observed, baseline.summary, lookup(baseline.config)[1])
        comparison = compare(observed, baseline.summary,
                             baseline.finding.evidence.get("decode_floor_ms", 0.0))
    kept, rejected, final = recommend(baseline, evaluator)
    model, gpu = lookup(baseline.config)
    refused = [memory_refusal(baseline.refusal)] if baseline.refusal else []
    return Diagnosis(
        header=header_lines(baseline.config, memory_layout(baseline.config), model.name,
                            gpu.name, workload),
        sent=sent, baseline=baseline, kept=kept, rejected=rejected, final=final,
        config_read=config_read(baseline.config, baseline.chunked, gpu),
        compatibility=refused + compatibility(baseline.config, baseline.chunked),
        measure_next=MEASURE_NEXT[baseline.finding.bottleneck],
        improvement_pct=IMPROVEMENT_PCT, vllm_version=FOLLOWED,
        observed=observed, comparison=comparison)


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
