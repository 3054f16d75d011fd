"""`kv-waste`: how much KV memory each reservation policy wastes (the lesson's exercise 4).

A request's KV cache grows one token at a time, and nobody knows its final length in advance. The
PagedAttention paper (Kwon et al., SOSP 2023, arXiv:2309.06180, Fig. 2) compares what that costs
under four policies, which this command puts side by side for any population of requests:

    contiguous (Orca-Max)     reserve max_model_len slots per request, up front
    power of two (Orca-Pow2)  reserve the prompt plus its output length rounded up to a power of
                              two (an output of 25 tokens reserves 32): at most 2x the output
    true length (Orca-Oracle) reserve exactly what the request will cache: needs a crystal ball
    paged (vLLM)              take a block of block_size slots whenever the tokens cross into one

Two answers for each. In closed form, at the end of every request: reserved slots against the
tokens it caches then, P + O - 1 for a prompt of P and O outputs (the last output is sampled and
returned, never written to the cache). A paged request wastes only the unfilled tail of its last
block; the true-length reservation wastes nothing. Over time, in a simulation: each policy's
reservation is held from a request's admission to its last token while its cache fills, and
waste is the time-averaged share of the reserved slots that held no token yet. There even the
true-length reservation wastes: its slots sit empty until the tokens arrive, which paging never
reserves ahead. The simulation serves the requests in CONTINUOUS+CHUNKED, whose own (paged) KV
accounting gives the paged figure; the others are the same schedule, accounted as if reserved.

The paper's figures are KV memory holding token states in its own runs (OPT-13B, ShareGPT, max
length 2048), beside the reservation and fragmentation that wasted the rest; its Orca also lost
memory to external fragmentation between reservations, which servesim does not model.
"""

import argparse
import functools
import json
import textwrap
from dataclasses import asdict, dataclass
from typing import Callable

from commands import flags
from commands.serving import require_completions
from commands.workload_flags import add_workload_flags, workload_from_args
from config import ConfigError
from kv_cache import num_blocks_for
from modes import MODES

BLOCK_SIZES = (1, 8, 16, 32, 128)  # the paged answer across block sizes
# Exercise 4's population: 1,000 requests whose outputs have mean 1,500 and sd 600 tokens (the
# normal dataset's defaults), after a prompt of 200 tokens (a short chat turn), all sent at once.
DEFAULT_NUM_PROMPTS = 1000
DEFAULT_PROMPT_LEN = 200
PAPER = "PagedAttention paper (Kwon et al., SOSP 2023, arXiv:2309.06180), Fig. 2"


@dataclass(frozen=True)
class Policy:
    name: str
    paper_name: str
    rule: str                                  # how it reserves, in words
    paper_token_states_pct: float              # the paper's Fig. 2: KV holding token states
    reserve: Callable[[int, int, int], int]    # (prompt, outputs, max_model_len) -> slots


def final_num_outputs(request, max_model_len: int) -> int:
    """The outputs a request will get: what it asked for, cut where it reaches max_model_len."""
    return min(request.max_tokens, max_model_len - request.prompt_len)


def tokens_cached(prompt_len: int, num_outputs: int) -> int:
    """What a finished request's KV holds: its prompt and every output but the last."""
    return prompt_len + num_outputs - 1


def reserve_max_model_len(prompt_len: int, num_outputs: int, max_model_len: int) -> int:
    return max_model_len


def reserve_power_of_two(prompt_len: int, num_outputs: int, max_model_len: int) -> int:
    """The prompt, and the output rounded up to a power of two: 25 outputs reserve 32."""
    return min(prompt_len + (1 << (num_outputs - 1).bit_length()), max_model_len)


def reserve_true_length(prompt_len: int, num_outputs: int, max_model_len: int) -> int:
    return tokens_cached(prompt_len, num_outputs)


def reserve_blocks(prompt_len: int, num_outputs: int, max_model_len: int,
                   block_size: int) -> int:
    """The blocks its tokens fill, the last one partly: ceil(tokens / block_size) blocks."""
    return num_blocks_for(tokens_cached(prompt_len, num_outputs), block_size) * block_size


def paged_policy(block_size: int) -> Policy:
    return Policy("paged", "vLLM", f"{block_size}-token blocks as it grows", 96.3,
                  functools.partial(reserve_blocks, block_size=block_size))


def policies(block_size: int) -> list[Policy]:
    return [Policy("contiguous", "Orca (Max)", "max_model_len", 20.4, reserve_max_model_len),
            Policy("pow2", "Orca (Pow2)", "prompt + output to 2^k", 26.8, reserve_power_of_two),
            Policy("oracle", "Orca (Oracle)", "its final length", 38.2, reserve_true_length),
            paged_policy(block_size)]


@dataclass
class Population:
    """The requests' final lengths: (prompt, outputs it will get), outputs capped where the
    sequence reaches max_model_len (as the engine caps them); rejected prompts left out."""
    lengths: list[tuple[int, int]]
    max_model_len: int
    num_rejected: int

    @classmethod
    def of(cls, workload, max_model_len: int) -> "Population":
        lengths, num_rejected = [], 0
        for request in workload.make_requests():
            if request.prompt_len >= max_model_len:
                num_rejected += 1
                continue
            lengths.append((request.prompt_len, final_num_outputs(request, max_model_len)))
        return cls(lengths, max_model_len, num_rejected)

    def used_slots(self) -> int:
        return sum(tokens_cached(p, o) for p, o in self.lengths)

    def reserved_slots(self, policy: Policy) -> int:
        return sum(policy.reserve(p, o, self.max_model_len) for p, o in self.lengths)

    def waste_pct(self, policy: Policy) -> float:
        return 100 * (1 - self.used_slots() / self.reserved_slots(policy))

    def mean_blocks(self, block_size: int) -> float:
        """Block-table entries per request at its end."""
        return sum(num_blocks_for(tokens_cached(p, o), block_size)
                   for p, o in self.lengths) / len(self.lengths)


class ReservationAccounting:
    """Observer: every policy's reservations held over the run, against the tokens cached.

    A request reserves under each policy when it is first scheduled (admitted, or resumed after
    a preemption, which freed everything) and returns it when it finishes or is preempted. Used
    slots and the paged reservation are the engine's own, while each step ran. Only new
    admissions and ends are read, which the bulk path names too: a sums observer.
    """
    needs_every_request = False

    def __init__(self, all_policies: list[Policy], max_model_len: int):
        self.policies = [policy for policy in all_policies if policy.name != "paged"]
        self.max_model_len = max_model_len
        self.holding: dict = {}  # request -> its reservation under each policy
        self.reserved = [0] * len(self.policies)
        self.reserved_slot_seconds = [0.0] * len(self.policies)
        self.paged_slot_seconds = 0.0
        self.used_slot_seconds = 0.0

    def __call__(self, step) -> None:
        for request in step.batch.preempted:
            self._release(request)
        for scheduled in step.batch.scheduled:
            if scheduled.request not in self.holding:
                self._reserve(scheduled.request)
        for index, reserved in enumerate(self.reserved):
            self.reserved_slot_seconds[index] += reserved * step.step_s
        self.paged_slot_seconds += step.kv_reserved_slots * step.step_s
        self.used_slot_seconds += step.kv_used_slots * step.step_s
        for request in step.result.finished:
            self._release(request)

    def _reserve(self, request) -> None:
        outputs = final_num_outputs(request, self.max_model_len)
        slots = [p.reserve(request.prompt_len, outputs, self.max_model_len) for p in self.policies]
        self.holding[request] = slots
        self.reserved = [total + mine for total, mine in zip(self.reserved, slots)]

    def _release(self, request) -> None:
        slots = self.holding.pop(request)
        self.reserved = [total - mine for total, mine in zip(self.reserved, slots)]

    def waste_pct(self) -> dict[str, float]:
        """Per policy: reserved slot-seconds that held no token, % of the reserved."""
        waste = {policy.name: 100 * (1 - self.used_slot_seconds / slot_seconds)
                 for policy, slot_seconds in zip(self.policies, self.reserved_slot_seconds)}
        waste["paged"] = 100 * (1 - self.used_slot_seconds / self.paged_slot_seconds)
        return waste


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "kv-waste", help="KV waste of contiguous, power-of-two, true-length and paged "
                         "reservations (exercise 4)",
        description="For a population of requests (default: exercise 4's, "
                    f"{DEFAULT_NUM_PROMPTS:,} requests, {DEFAULT_PROMPT_LEN}-token prompts, "
                    "outputs of mean 1,500 and sd 600 tokens, all sent at once; or any dataset "
                    "or trace): reserved and used KV slots and waste % = (reserved - used) / "
                    "reserved, under the reservation policies of the PagedAttention paper's "
                    "Fig. 2, in closed form (at each request's end) and over time (time-averaged "
                    "while CONTINUOUS+CHUNKED serves them), with the paper's own figures; then the "
                    "paged answer and block-table entries per request across block sizes.")
    flags.add_engine_flags(parser, knobs)
    add_workload_flags(parser)
    parser.add_argument_group("output").add_argument("--format", choices=["table", "json"],
                                                     default="table")
    parser.flag_hints = {"--mode": "it accounts every reservation policy on one "
                                   "CONTINUOUS+CHUNKED schedule"}
    parser.set_defaults(command=run_kv_waste)


def exercise_four_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Without --dataset-name or --trace: exercise 4's population (normal outputs of mean 1,500,
    sd 600: the normal dataset's defaults), with a fixed prompt unless --input-mean says."""
    if args.dataset_name is not None or args.trace is not None:
        return args
    given = vars(args)
    return argparse.Namespace(**{
        **given, "dataset_name": "normal",
        "num_prompts": DEFAULT_NUM_PROMPTS if args.num_prompts is None else args.num_prompts,
        "input_mean": DEFAULT_PROMPT_LEN if args.input_mean is None else args.input_mean,
        "input_std": 0.0 if args.input_std is None else args.input_std})


def run_kv_waste(args: argparse.Namespace, context) -> str:
    args = exercise_four_defaults(args)
    engine = flags.engine_from_args(args, context, [MODES["chunked"]])
    workload = workload_from_args(args, engine.config)
    config = engine.config
    population = Population.of(workload, config.max_model_len)
    if not population.lengths:
        raise ConfigError(f"kv-waste: every request's prompt is at least --max-model-len "
                          f"{config.max_model_len}; raise it")
    all_policies = policies(config.block_size)
    accounting = ReservationAccounting(all_policies, config.max_model_len)
    recorder = engine.serve(workload, MODES["chunked"], [accounting])
    require_completions(recorder)
    over_time = accounting.waste_pct()
    report = KvWasteReport(engine, workload, population, all_policies, over_time,
                           recorder.summary())
    return report.json() if args.format == "json" else "\n".join(report.lines())


@dataclass
class KvWasteReport:
    engine: object
    workload: object
    population: Population
    policies: list[Policy]
    over_time_waste_pct: dict[str, float]
    simulation: dict   # the CONTINUOUS+CHUNKED run's summary

    def block_size_rows(self) -> list[dict]:
        rows = []
        for block_size in BLOCK_SIZES:
            paged = paged_policy(block_size)
            rows.append({"block_size": block_size,
                         "paged_waste_pct": self.population.waste_pct(paged),
                         "mean_blocks_per_request": self.population.mean_blocks(block_size)})
        return rows

    def policy_rows(self) -> list[dict]:
        return [{"policy": policy.name, "paper_name": policy.paper_name, "reserves": policy.rule,
                 "reserved_slots": self.population.reserved_slots(policy),
                 "used_slots": self.population.used_slots(),
                 "waste_pct": self.population.waste_pct(policy),
                 "over_time_waste_pct": self.over_time_waste_pct[policy.name],
                 "paper_token_states_pct": policy.paper_token_states_pct}
                for policy in self.policies]

    def json(self) -> str:
        config = self.engine.config
        rows = self.policy_rows()
        document = {"config": {**asdict(config), "num_gpu_blocks": self.engine.plan.num_gpu_blocks},
                    "workload": self.workload.params,
                    "num_requests": len(self.population.lengths),
                    "num_rejected": self.population.num_rejected,
                    "mean_tokens_cached": self.population.used_slots() / len(self.population.lengths),
                    **{f"{row['policy']}_waste_pct": row["waste_pct"] for row in rows},
                    "policies": rows, "block_sizes": self.block_size_rows(),
                    "simulation": {"mode": "CONTINUOUS+CHUNKED", **self.simulation},
                    "paper": PAPER}
        return json.dumps(document, indent=2, allow_nan=False)

    def lines(self) -> list[str]:
        population, config = self.population, self.engine.config
        title = self.engine.title_lines(self.workload)[0]
        num = len(population.lengths)
        rejected = (f", {population.num_rejected:,} more rejected (prompt >= max_model_len)"
                    if population.num_rejected else "")
        used = population.used_slots()
        lines = [title.replace("servesim:", "servesim kv-waste:"),
                 f"workload: {self.workload.description}",
                 f"{num:,} requests{rejected}; at their ends they cache {used:,} tokens, "
                 f"{used / num:,.0f} each on average; max_model_len {config.max_model_len}", ""]
        rows = [("policy", "paper's name", "reserves", "reserved", "waste %", "over time %",
                 "holds %", "paper %")]
        for row in self.policy_rows():
            rows.append((row["policy"], row["paper_name"], row["reserves"],
                         f"{row['reserved_slots']:,}", f"{row['waste_pct']:.1f}",
                         f"{row['over_time_waste_pct']:.1f}",
                         f"{100 - row['over_time_waste_pct']:.1f}",
                         f"{row['paper_token_states_pct']:.1f}"))
        lines += _aligned(rows, num_text_columns=3)
        lines += wrapped(
            "reserved: KV slots (tokens) reserved for the requests at their ends; waste % = "
            "(reserved - cached) / reserved. over time %: the same, time-averaged while "
            f"CONTINUOUS+CHUNKED served them ({self.simulation['duration']:,.1f} s, "
            f"{config.block_size}-token blocks), each reservation held from admission to the last "
            "token while the cache fills; holds % = 100 - over time %. paper %: KV holding token "
            f"states in the {PAPER}, OPT-13B on ShareGPT.")
        mean_output = sum(o for _, o in population.lengths) / num
        lines += wrapped(
            f"The lesson counts outputs alone: 1 - {mean_output:,.0f} / {config.max_model_len:,} = "
            f"{100 * (1 - mean_output / config.max_model_len):.1f}% of a contiguous reservation "
            "wasted.")
        lines += ["", "paged, by block size (closed form): less waste, more block-table entries"]
        rows = [("block size", "waste %", "blocks per request")]
        for row in self.block_size_rows():
            rows.append((str(row["block_size"]), f"{row['paged_waste_pct']:.2f}",
                         f"{row['mean_blocks_per_request']:,.1f}"))
        return lines + _aligned(rows, num_text_columns=0)


def wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, width=100)


def _aligned(rows: list[tuple], num_text_columns: int) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) if i < num_text_columns else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
