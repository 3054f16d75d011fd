"""`recommend`: the fewest GPUs, and the flags, that serve a target load within the SLO.

For a model, a workload and an SLO (--goodput, default the chat SLO), and a target request rate
(--target-rate R) or number of clients (--target-concurrency C), every GPU type, every tensor
parallel size with which vLLM would start, and the fewest replicas that carry the load:

    for each GPU type and TP size that starts (vLLM 0.30.0's defaults for flags left out):
        replicas N = 1, 2, 4, ... until the load, split round-robin over N replicas,
        meets the SLO (tuning.SLO_ATTAINMENT_PCT of the requests meet every SLO); then the
        fewest N between the last two that does
    where the fewest replicas N of a GPU type are two or more, prefill/decode disaggregation
    on as many GPUs and on one engine fewer: every P:D split with P + D = N or N - 1
    (disaggregation.py's pools, the KV moved over the default link), served whole
    print every option found, cheapest first, marking the Pareto front of GPUs and mean
    TPOT (no other option as cheap is faster), like vLLM's `bench sweep plot_pareto`

Replicas are served as vLLM's data parallelism with a round-robin router runs them: replica i
gets requests i, i + N, i + 2N, ... of the load (its Poisson stream thinned, or its share of
the clients), and replicas share nothing, so each is one engine run of its share; the figures
pool every replica's requests. The load keeps at least MIN_REQUESTS_PER_REPLICA requests for
each replica, and at a target rate lasts at least MIN_LOAD_S seconds, so that the tail of each
is measured (goodput counts the drain after the last arrival too, as vllm bench serve does).
"""

import argparse
import copy
import itertools
import json
import math
import textwrap
from dataclasses import asdict, dataclass
from typing import Optional

from commands import flags
from commands.diagnose import assume_vllm_defaults
from commands.tuning import SLO_ATTAINMENT_PCT
from commands.workload_flags import (DEFAULT_NUM_PROMPTS, add_workload_flags, workload_from_args,
                                     workload_kind)
from config import ConfigError, valid_tensor_parallel_sizes
from goodput import is_good, request_latencies_ms
from presets import GPUS
from workload import Workload

MAX_GPUS = 64                  # the most GPUs an option may take (eight nodes of eight)
MIN_REQUESTS_PER_REPLICA = 40  # each replica's share of the load: enough for its tail ...
MIN_LOAD_S = 10                # ... and at a target rate, at least this long a stream
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)  # within one node


@dataclass
class Option:
    """One way to serve the load: a GPU type, TP size and replicas, and what came of it."""
    gpu: str
    tensor_parallel_size: int
    replicas: int
    num_gpus: int
    slo_met_pct: float          # requests that met every SLO, % of those sent
    goodput: float              # req/s, every replica pooled
    goodput_per_gpu: float
    mean_ttft_ms: float
    mean_tpot_ms: float
    one_fewer_slo_met_pct: Optional[float] = None  # with one replica fewer: below the target
    pareto: bool = False
    pd: Optional[str] = None    # "P:D": prefill and decode engines (replicas = P + D) instead

    def flags(self, model: str) -> str:
        text = f"--model {model} --gpu {self.gpu} --tensor-parallel-size {self.tensor_parallel_size}"
        if self.pd is not None:
            return text + f" --pd {self.pd}"
        return text + (f", {self.replicas} replicas" if self.replicas > 1 else "")

    @property
    def engines(self) -> str:
        return f"{self.pd.replace(':', 'P:')}D" if self.pd else str(self.replicas)


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "recommend", help="the fewest GPUs and the flags that serve a target load within the SLO",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__.split(
            "\n\n", 1)[1])
    flags.add_engine_flags(parser, knobs)
    add_workload_flags(parser)
    group = parser.add_argument_group("the target")
    target = group.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-rate", type=float, default=None, metavar="REQ_PER_S",
                        help="requests a second to serve (Poisson, as --request-rate)")
    target.add_argument("--target-concurrency", type=int, default=None, metavar="CLIENTS",
                        help="clients to serve, each sending its next request when the last "
                             "one ends (as --max-concurrency)")
    group.add_argument("--gpus", default=None, metavar="GPU[,GPU...]",
                       help=f"the GPU types to try (default every preset: {', '.join(GPUS)})")
    group.add_argument("--format", choices=["table", "json"], default="table")
    flags.add_chat_goodput_flag(parser)
    parser.set_defaults(command=run_recommend, mode=None, gpu_memory_utilization=None)


def run_recommend(args: argparse.Namespace, context) -> str:
    options, missed, model = recommend(args, context)
    if args.format == "json":
        return json.dumps({"model": model, "options": [asdict(o) for o in options],
                           "recommended": asdict(options[0]) if options else None,
                           "disaggregated_missed": [asdict(o) for o in missed]}, indent=2)
    return "\n".join(page(args, options, missed, model))


def recommend(args: argparse.Namespace, context) -> tuple[list[Option], list[Option], str]:
    """Every option that meets the SLO, cheapest first; the P:D splits that missed it."""
    gpus = check_target(args)
    slos_ms = flags.parse_goodput(args.goodput or list(flags.CHAT_GOODPUT))
    options = []
    for gpu, tp in itertools.product(gpus, TENSOR_PARALLEL_SIZES):
        if tp in valid_tensor_parallel_sizes(args.model):
            option = fewest_replicas(args, context, gpu, tp, slos_ms)
            if option is not None:
                options.append(option)
    splits = disaggregated(args, context, options, slos_ms)
    options += [o for o in splits if o.slo_met_pct >= SLO_ATTAINMENT_PCT]
    missed = [o for o in splits if o.slo_met_pct < SLO_ATTAINMENT_PCT]
    options.sort(key=lambda o: (o.num_gpus, o.mean_tpot_ms))
    for option in options:
        option.pareto = not any(other.num_gpus <= option.num_gpus
                                and other.mean_tpot_ms < option.mean_tpot_ms
                                for other in options)
    return options, missed, args.model


def check_target(args: argparse.Namespace) -> list[str]:
    """The target and the GPU list, checked before anything runs."""
    if args.target_rate is not None and not (0 < args.target_rate < math.inf):
        raise ConfigError(f"--target-rate must be a number of requests a second > 0, not "
                          f"{args.target_rate:g}")
    if args.target_concurrency is not None and args.target_concurrency < 1:
        raise ConfigError(f"--target-concurrency must be a whole number of clients >= 1, not "
                          f"{args.target_concurrency}")
    for flag in ("request_rate", "max_concurrency"):
        if getattr(args, flag) is not None:
            raise ConfigError(f"recommend sets --{flag.replace('_', '-')} itself from the "
                              "target; give --target-rate or --target-concurrency instead")
    if workload_kind(args) == "trace":
        raise ConfigError("recommend serves a synthetic workload at the target load; a --trace "
                          "keeps its own arrival times (replay it with run instead)")
    names = [n.strip() for n in args.gpus.split(",")] if args.gpus else list(GPUS)
    unknown = [n for n in names if n not in GPUS]
    if unknown or not names:
        named = ",".join(unknown) if unknown else repr(args.gpus)
        raise ConfigError(f"unknown --gpus {named}; choose from {', '.join(GPUS)}")
    return names


def fewest_replicas(args, context, gpu: str, tp: int, slos_ms) -> Optional[Option]:
    """The fewest replicas of (gpu, tp) that meet the SLO at the target, or None: the config
    does not start, or even MAX_GPUS of it miss."""
    served = {}

    def serve(replicas: int) -> Optional[Option]:
        if replicas not in served:
            served[replicas] = serve_split(args, context, gpu, tp, replicas, slos_ms)
        return served[replicas]

    first = serve(1)
    if first is None:
        return None  # vLLM would not start it
    replicas = 1
    while first.slo_met_pct < SLO_ATTAINMENT_PCT:
        if 2 * replicas * tp > MAX_GPUS:
            return None
        replicas *= 2
        first = serve(replicas)
    low, high = replicas // 2, replicas  # low misses (or is 0), high meets
    while high - low > 1:
        middle = (low + high) // 2
        if serve(middle).slo_met_pct >= SLO_ATTAINMENT_PCT:
            high = middle
        else:
            low = middle
    option = serve(high)
    if low >= 1:  # served, and missed: the evidence that `high` is the fewest
        option.one_fewer_slo_met_pct = serve(low).slo_met_pct
    return option


def disaggregated(args, context, options: list[Option], slos_ms) -> list[Option]:
    """For each GPU type's cheapest option of two or more replicas: every P:D split on as
    many engines and on one fewer, served (those vLLM would start)."""
    cheapest = {}
    for option in sorted(options, key=lambda o: (o.num_gpus, o.mean_tpot_ms)):
        cheapest.setdefault(option.gpu, option)
    found = []
    for option in cheapest.values():
        for engines in (option.replicas, option.replicas - 1):
            for num_prefill in range(1, engines):
                pd = f"{num_prefill}:{engines - num_prefill}"
                served = serve_split(args, context, option.gpu, option.tensor_parallel_size,
                                     engines, slos_ms, pd=pd)
                if served is not None:
                    found.append(served)
    return found


def serve_split(args, context, gpu: str, tp: int, replicas: int, slos_ms,
                pd: Optional[str] = None) -> Optional[Option]:
    """The target load split round-robin over `replicas` engines of (gpu, tp), each served (or,
    with `pd` "P:D", served whole by P prefill and D decode engines); None if vLLM would not
    start the engine."""
    changed = copy.copy(args)
    changed.gpu, changed.tensor_parallel_size, changed.pd = gpu, tp, pd
    assume_vllm_defaults(changed)
    if args.target_rate is not None:
        changed.request_rate = args.target_rate
    else:
        changed.max_concurrency = args.target_concurrency
    changed.num_prompts = max(args.num_prompts or DEFAULT_NUM_PROMPTS,
                              MIN_REQUESTS_PER_REPLICA * replicas,
                              math.ceil((args.target_rate or 0) * MIN_LOAD_S))
    modes = flags.modes_from_args(changed, ["chunked"])
    try:
        engine = flags.engine_from_args(changed, context, modes)
    except ConfigError:
        return None
    workload = workload_from_args(changed, engine.config)
    shares = [workload] if pd else [replica_share(workload, replica, replicas)
                                    for replica in range(replicas)]
    completed, sent, first_arrival_s, last_token_s = [], 0, math.inf, 0.0
    for share in shares:
        if share.max_concurrency == 0:
            continue  # fewer clients than replicas: this one idles
        recorder = engine.serve(share, modes[0])
        completed += recorder.completed()
        sent += len(recorder.completed()) + len(recorder.rejections())
    for request in completed:
        first_arrival_s = min(first_arrival_s, request.arrival_s)
        last_token_s = max(last_token_s, request.last_token_s)
    duration_s = max(last_token_s - first_arrival_s, 1e-9)
    good = sum(1 for request in completed if is_good(request, slos_ms))
    latencies = [request_latencies_ms(request) for request in completed]
    return Option(gpu, tp, replicas, tp * replicas,
                  slo_met_pct=100 * good / sent if sent else 0.0,
                  goodput=good / duration_s, goodput_per_gpu=good / duration_s / (tp * replicas),
                  mean_ttft_ms=_mean(l["ttft"] for l in latencies),
                  mean_tpot_ms=_mean(l["tpot"] for l in latencies), pd=pd)


def replica_share(workload: Workload, replica: int, replicas: int) -> Workload:
    """What a round-robin router sends replica `replica` of `replicas`: every replicas-th
    request from the replica-th, at its own arrival time (with clients, their share)."""
    def make_requests():
        return itertools.islice(workload.make_requests(), replica, None, replicas)

    clients = workload.max_concurrency
    if clients is not None:  # clients replica, replica + N, ...: none for some if C < N
        clients = len(range(replica, clients, replicas))
    return Workload(workload.name, workload.description, workload.params, make_requests,
                    max_concurrency=clients, known_span_s=workload.known_span_s)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def page(args, options: list[Option], missed: list[Option], model: str) -> list[str]:
    target = (f"{args.target_rate:g} req/s" if args.target_rate is not None
              else f"{args.target_concurrency} clients")
    lines = [f"recommend: {model} at {target}; the SLO is met when {SLO_ATTAINMENT_PCT:g}% of the "
             "requests meet every SLO (" + " and ".join(
                 f"{name.upper()} <= {ms:g} ms" for name, ms in flags.parse_goodput(
                     args.goodput or list(flags.CHAT_GOODPUT)).items()) + ")"]
    if not options:
        lines.append(f"no option meets it on these GPUs within {MAX_GPUS} GPUs")
        return lines
    best = options[0]
    lines.append(f"fewest GPUs: {best.num_gpus} ({best.flags(model)})")
    lines.append("")
    header = ("GPU", "TP", "engines", "GPUs", "SLO met %", "goodput req/s", "per GPU",
              "mean TTFT ms", "mean TPOT ms", "Pareto")
    rows = [header] + [(o.gpu, str(o.tensor_parallel_size), o.engines, str(o.num_gpus),
                        f"{o.slo_met_pct:.1f}", f"{o.goodput:.2f}", f"{o.goodput_per_gpu:.2f}",
                        f"{o.mean_ttft_ms:,.0f}", f"{o.mean_tpot_ms:.1f}",
                        "*" if o.pareto else "") for o in options]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip())
    if missed:
        lines += textwrap.wrap("prefill/decode splits that missed the SLO: " + ", ".join(
            f"{o.gpu} TP {o.tensor_parallel_size} {o.engines} ({o.slo_met_pct:.1f}% met, mean "
            f"TTFT {o.mean_ttft_ms:,.0f} ms)" for o in missed), width=100)
    lines += ["", *textwrap.wrap(
        "Pareto: no option with as few GPUs has a lower mean TPOT. engines: replicas, served as "
        "a round-robin router spreads the load (each its share, sharing nothing), or P prefill "
        "and D decode engines (PP:DD, --pd P:D: the KV moved between them); SLO met %: requests "
        "meeting every SLO, of those sent.", width=100)]
    return lines
