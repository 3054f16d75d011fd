"""Mixed traffic: who sends what, and when.

A workload is a recipe for a stream of requests (arrival time, prompt length, output length),
made fresh for every mode so that each mode serves exactly the same requests. Streams are lazy:
a synthetic generator draws the next request only when the engine's clock reaches it, and a trace
file (trace_replay.py) is read line by line, never loaded whole.

*What* is sent, the lengths in tokens (`--dataset-name`, as in `vllm bench serve`):
- `mixed`: the lesson's traffic, many chat-sized prompts and a few long documents;
- `random`: vLLM's random dataset, lengths uniform within a ratio of a target;
- `normal`: normally distributed lengths (exercise 4: outputs of mean 1,500, std 600);
- `prefix_repetition`: vLLM's shared-prefix dataset, a few prefixes each opening many prompts
  (and `--random-prefix-len` gives every `random` prompt one shared prefix): what prefix
  caching is for.

*How* it is sent is the arrival process (arrivals.py): an open loop at `--request-rate` with
gamma-distributed gaps, or a closed loop of `--max-concurrency` clients.

Every random draw goes through a `random.Random(seed)`: same seed, same requests. Other code
builds workloads with the functions at the end (a trace with `trace_replay.trace_workload`). The
lesson's headline, 128 clients each sending a 1,000-token prompt for a 1,000-token answer, is

    random_workload(input_len=1000, output_len=1000, num_prompts=1000, max_concurrency=128)
"""

import math
import random
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterator, Optional, Protocol

from arrivals import ClosedLoopClients, OpenLoopArrivals, arrival_times
from config import MAX_TOKENS, Range
from request import Request, TokenContent


DEFAULT_NUM_PROMPTS = 80   # enough traffic to show the lesson, small enough to run instantly
SHARED_PREFIX_SOURCE = 3   # in a TokenContent, a synthetic prefix k is source (3, k) ...
OWN_SUFFIX_SOURCE = 4      # ... and a synthetic prompt's own suffix i is (4, i) ...
RESENT_PROMPT_SOURCE = 5   # ... and the i-th prompt of a set sent again is (5, i)
MIXED_REQUEST_RATE = 4.0   # requests per second: the rate the lesson's mixed traffic states
MAX_NUM_PROMPTS = 10_000_000  # a run keeps ~40 bytes per request; ten million take an hour

# What each workload flag may be (config.Range: the same one-line refusals as the engine's flags).
NUM_PROMPTS = Range(1, MAX_NUM_PROMPTS, integer=True)
# Gamma gaps of shape B and mean 1/R have scale 1/(R x B): bounded, that stays a positive float.
REQUEST_RATE = Range(0, 1e9, above_low=True, allow_inf=True, unit="req/s")
BURSTINESS = Range(0, 1e6, above_low=True, why="1e6: gaps all but equal")
LENGTH = Range(1, MAX_TOKENS, integer=True, unit="tokens")
PREFIX_LENGTH = Range(0, MAX_TOKENS, integer=True, unit="tokens")  # a shared prefix; 0: none
RANGE_RATIO = Range(0, 1, below_high=True)
NORMAL_PARAMETER = Range(0, MAX_TOKENS, unit="tokens")
# Python's random.Random(-1) draws as Random(1) does; vllm bench serve's numpy takes 0 .. 2^32 - 1.
SEED = Range(0, 2**32 - 1, integer=True, why="the seeds vllm bench serve takes")


class WorkloadError(ValueError):
    """Bad workload input (a trace line, a parameter); the message is one line for the user."""


@dataclass
class Workload:
    name: str                  # "mixed", "random", "normal", "trace"
    description: str           # one line for the report header
    params: dict               # what the JSON "workload" object reports
    make_requests: Callable[[], Iterator[Request]]  # a fresh stream, in arrival order
    max_concurrency: Optional[int] = None
    known_span_s: Optional[float] = None  # when the last request is planned to arrive, if known

    def planned_span_s(self) -> float:
        """When the last request is planned to arrive (s): known for a trace (its first reading)
        and for everything sent at once, else drawn once more (cheap beside serving it)."""
        if self.known_span_s is not None:
            return self.known_span_s
        return max((request.arrival_s for request in self.make_requests()), default=0.0)

    def arrivals(self):
        if self.max_concurrency is None:
            return OpenLoopArrivals(self.make_requests())
        return ClosedLoopClients(self.make_requests(), self.max_concurrency)


# -- what is sent: the length distributions -------------------------------------------------------

class Lengths(Protocol):
    def draw(self, rng: random.Random) -> tuple[int, int]:
        """One request's (prompt_len, output_len), in tokens."""

    def describe(self) -> str:
        """The lengths, for the report header."""


@dataclass(frozen=True)
class MixedLengths:
    """Many chat-sized prompts and a few long documents, the traffic the lesson worries about."""
    long_fraction: float = 0.1        # share of long-document requests
    short_prompt: tuple = (100, 1500)  # uniform, tokens
    long_prompt: tuple = (6000, 7800)  # "8k-token" documents that still fit max_model_len 8192
    short_output: tuple = (20, 400)
    long_output: tuple = (50, 300)

    def draw(self, rng: random.Random) -> tuple[int, int]:
        is_long = rng.random() < self.long_fraction
        prompt_range = self.long_prompt if is_long else self.short_prompt
        output_range = self.long_output if is_long else self.short_output
        return rng.randint(*prompt_range), rng.randint(*output_range)

    def describe(self) -> str:
        long_pct = round(100 * self.long_fraction)
        return (f"{100 - long_pct}% prompts {self.short_prompt[0]}-{self.short_prompt[1]} tok, "
                f"{long_pct}% {self.long_prompt[0]}-{self.long_prompt[1]} tok")


@dataclass(frozen=True)
class RandomLengths:
    """vLLM's random dataset: lengths uniform within +-range_ratio of a target.

    Exactly as `vllm bench serve` samples them: integers uniform in
    [floor(len x (1 - r)), ceil(len x (1 + r))], both ends included, at least 1 output token (and
    here at least 1 prompt token); r = 0 gives every request the target lengths. For input_len 1024
    and r 0.1: prompts of 921 to 1127 tokens. (vLLM first takes the tokens its tokenizer adds off
    input_len; servesim has no tokenizer.)
    """
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    prefix_len: int = 0   # a fixed prefix every prompt opens with, before its random part

    def __post_init__(self):
        LENGTH.check("--random-input-len", self.input_len, WorkloadError)
        LENGTH.check("--random-output-len", self.output_len, WorkloadError)
        RANGE_RATIO.check("--random-range-ratio", self.range_ratio, WorkloadError)
        PREFIX_LENGTH.check("--random-prefix-len", self.prefix_len, WorkloadError)

    @property
    def shared_prefix(self) -> Optional[TokenContent]:
        """What every prompt's first `prefix_len` tokens are: the same for all (vLLM draws one
        prefix for the whole dataset)."""
        if not self.prefix_len:
            return None
        return TokenContent.of([((SHARED_PREFIX_SOURCE, 0), self.prefix_len)])

    @cached_property  # (worked out once: every request draws from it)
    def input_range(self) -> tuple[int, int]:
        low = math.floor(self.input_len * (1 - self.range_ratio))
        return max(1, low), math.ceil(self.input_len * (1 + self.range_ratio))

    @cached_property
    def output_range(self) -> tuple[int, int]:
        low = math.floor(self.output_len * (1 - self.range_ratio))
        return max(1, low), math.ceil(self.output_len * (1 + self.range_ratio))

    def draw(self, rng: random.Random) -> tuple[int, int]:
        return self.prefix_len + rng.randint(*self.input_range), rng.randint(*self.output_range)

    def describe(self) -> str:
        prefix = f"a shared {self.prefix_len}-tok prefix + " if self.prefix_len else ""
        return (f"prompts {prefix}{_span(self.input_range)} tok, outputs "
                f"{_span(self.output_range)} tok")


@dataclass(frozen=True)
class NormalLengths:
    """Normally distributed lengths, rounded to whole tokens and clipped to [1, max_model_len].

    Clipping piles the tails onto the bounds: with outputs of mean 1,500 and std 600, 0.6% of
    draws fall below one token and become 1. A prompt clipped to max_model_len leaves no room
    for output, so the engine rejects it, as vLLM would.
    """
    input_mean: float = 1024
    input_std: float = 256
    output_mean: float = 1500   # exercise 4's outputs
    output_std: float = 600
    max_model_len: int = 8192

    def __post_init__(self):
        for flag, value in (("--input-mean", self.input_mean), ("--output-mean", self.output_mean),
                            ("--input-std", self.input_std), ("--output-std", self.output_std)):
            NORMAL_PARAMETER.check(flag, value, WorkloadError)

    def draw(self, rng: random.Random) -> tuple[int, int]:
        return (self._clip(rng.gauss(self.input_mean, self.input_std)),
                self._clip(rng.gauss(self.output_mean, self.output_std)))

    def _clip(self, tokens: float) -> int:
        """Clipped before it is rounded: a draw far out in a wide tail stays a float."""
        return round(min(max(tokens, 1.0), self.max_model_len))

    def describe(self) -> str:
        prompts = (f"prompts {self.input_mean:g} tok" if self.input_std == 0 else
                   f"prompts ~N({self.input_mean:g}, {self.input_std:g}) tok")
        return (f"{prompts}, outputs ~N({self.output_mean:g}, {self.output_std:g}) tok, in "
                f"[1, {self.max_model_len}]")


def _span(low_high: tuple[int, int]) -> str:
    low, high = low_high
    return str(low) if low == high else f"{low}-{high}"


def synthetic_requests(lengths: Lengths, num_prompts: int, request_rate: float, burstiness: float,
                       length_rng: random.Random, arrival_rng: random.Random) -> Iterator[Request]:
    times = arrival_times(arrival_rng, request_rate, burstiness)
    content = getattr(lengths, "shared_prefix", None)
    for index in range(num_prompts):
        arrival_s = next(times)
        prompt_len, output_len = lengths.draw(length_rng)
        yield Request(str(index), arrival_s, prompt_len, output_len, content=content)


# -- building workloads ---------------------------------------------------------------------------

def mixed_workload(num_prompts: int = DEFAULT_NUM_PROMPTS,
                   request_rate: float = MIXED_REQUEST_RATE, burstiness: float = 1.0,
                   seed: int = 0, max_concurrency: Optional[int] = None) -> Workload:
    """The lesson's default traffic: 90% chat-sized prompts, 10% long documents."""
    lengths = MixedLengths()

    def make_requests() -> Iterator[Request]:
        rng = random.Random(seed)  # one generator for gaps and lengths: the lesson's draws
        return synthetic_requests(lengths, num_prompts, request_rate, burstiness, rng, rng)

    return _synthetic_workload("mixed", lengths, {"long_fraction": lengths.long_fraction},
                               make_requests, num_prompts, request_rate, burstiness, seed,
                               max_concurrency)


def random_workload(input_len: int = 1024, output_len: int = 128, range_ratio: float = 0.0,
                    num_prompts: int = DEFAULT_NUM_PROMPTS, request_rate: float = math.inf,
                    burstiness: float = 1.0, seed: int = 0,
                    max_concurrency: Optional[int] = None, prefix_len: int = 0) -> Workload:
    """`vllm bench serve --dataset-name random`; by default everything is sent at t=0."""
    lengths = RandomLengths(input_len, output_len, range_ratio, prefix_len)
    params = {"random_input_len": input_len, "random_output_len": output_len,
              "random_range_ratio": range_ratio, "input_len_range": list(lengths.input_range),
              "output_len_range": list(lengths.output_range)}
    if prefix_len:
        params["random_prefix_len"] = prefix_len
    make_requests = _separate_streams(lengths, num_prompts, request_rate, burstiness, seed)
    return _synthetic_workload("random", lengths, params, make_requests, num_prompts,
                               request_rate, burstiness, seed, max_concurrency)


def normal_workload(input_mean: float = 1024, input_std: float = 256, output_mean: float = 1500,
                    output_std: float = 600, max_model_len: int = 8192, num_prompts: int = DEFAULT_NUM_PROMPTS,
                    request_rate: float = math.inf, burstiness: float = 1.0, seed: int = 0,
                    max_concurrency: Optional[int] = None) -> Workload:
    """Normally distributed lengths; the defaults are exercise 4's outputs."""
    lengths = NormalLengths(input_mean, input_std, output_mean, output_std, max_model_len)
    params = {"input_mean": input_mean, "input_std": input_std, "output_mean": output_mean,
              "output_std": output_std, "max_model_len": max_model_len}
    make_requests = _separate_streams(lengths, num_prompts, request_rate, burstiness, seed)
    return _synthetic_workload("normal", lengths, params, make_requests, num_prompts,
                               request_rate, burstiness, seed, max_concurrency)


def prefix_repetition_workload(prefix_len: int = 256, suffix_len: int = 256,
                               num_prefixes: int = 10, output_len: int = 128,
                               num_prompts: int = DEFAULT_NUM_PROMPTS,
                               request_rate: float = math.inf, burstiness: float = 1.0,
                               seed: int = 0, max_concurrency: Optional[int] = None) -> Workload:
    """`vllm bench serve --dataset-name prefix_repetition`: `num_prefixes` prefixes, each opening
    num_prompts // num_prefixes prompts with suffixes of their own, shuffled; as vLLM does, a few
    prompts drawn again fill up to `num_prompts` (those repeat a whole prompt)."""
    LENGTH.check("--prefix-repetition-suffix-len", suffix_len, WorkloadError)
    LENGTH.check("--prefix-repetition-output-len", output_len, WorkloadError)
    NUM_PROMPTS.check("--prefix-repetition-num-prefixes", num_prefixes, WorkloadError)
    PREFIX_LENGTH.check("--prefix-repetition-prefix-len", prefix_len, WorkloadError)
    check_sending(num_prompts, max_concurrency)
    if num_prompts < num_prefixes:
        raise WorkloadError(f"--num-prompts {num_prompts} is fewer than "
                            f"--prefix-repetition-num-prefixes {num_prefixes}: every prefix needs "
                            "a prompt (vLLM refuses this too)")
    prompts_per_prefix = num_prompts // num_prefixes
    contents = [TokenContent.of([((SHARED_PREFIX_SOURCE, k), prefix_len),
                                 ((OWN_SUFFIX_SOURCE, k * prompts_per_prefix + i), suffix_len)])
                for k in range(num_prefixes) for i in range(prompts_per_prefix)]

    def make_requests() -> Iterator[Request]:
        rng = random.Random(seed)
        order = list(contents)
        rng.shuffle(order)
        order += [rng.choice(order) for _ in range(num_prompts - len(order))]
        times = arrival_times(random.Random(f"arrivals {seed}"), request_rate, burstiness)
        for index, content in enumerate(order):
            yield Request(str(index), next(times), prefix_len + suffix_len, output_len,
                          content=content)

    check_arrival_rate(request_rate, burstiness, seed)
    params = {"name": "prefix_repetition", "num_prompts": num_prompts,
              "request_rate": json_rate(request_rate), "burstiness": burstiness, "seed": seed,
              "max_concurrency": max_concurrency, "prefix_repetition_prefix_len": prefix_len,
              "prefix_repetition_suffix_len": suffix_len,
              "prefix_repetition_num_prefixes": num_prefixes,
              "prefix_repetition_output_len": output_len}
    description = (f"prefix_repetition: {num_prompts} requests, {_sending(request_rate, burstiness)}"
                   f", {num_prefixes} shared {prefix_len}-tok prefixes each opening "
                   f"{prompts_per_prefix}+ prompts of {prefix_len + suffix_len} tok, outputs "
                   f"{output_len} tok, seed {seed}" + closed_loop_note(max_concurrency))
    return Workload("prefix_repetition", description, params, make_requests, max_concurrency)


def _separate_streams(lengths: Lengths, num_prompts: int, request_rate: float,
                      burstiness: float, seed: int) -> Callable[[], Iterator[Request]]:
    """Lengths and gaps from two generators, as vllm bench serve samples them apart: the same
    seed sends the same requests at any --request-rate or --max-concurrency."""
    def make_requests() -> Iterator[Request]:
        return synthetic_requests(lengths, num_prompts, request_rate, burstiness,
                                  random.Random(seed), random.Random(f"arrivals {seed}"))
    return make_requests


def _synthetic_workload(name: str, lengths: Lengths, length_params: dict,
                        make_requests: Callable[[], Iterator[Request]], num_prompts: int,
                        request_rate: float, burstiness: float, seed: int,
                        max_concurrency: Optional[int]) -> Workload:
    check_sending(num_prompts, max_concurrency)
    check_arrival_rate(request_rate, burstiness, seed)
    params = {"name": name, "num_prompts": num_prompts, "request_rate": json_rate(request_rate),
              "burstiness": burstiness, "seed": seed, "max_concurrency": max_concurrency,
              **length_params}
    description = _describe(name, lengths, num_prompts, request_rate, burstiness, seed,
                            max_concurrency)
    sent_at_once = 0.0 if math.isinf(request_rate) else None
    return Workload(name, description, params, make_requests, max_concurrency, sent_at_once)


def _describe(name: str, lengths: Lengths, num_prompts: int, request_rate: float,
              burstiness: float, seed: int, max_concurrency: Optional[int]) -> str:
    return (f"{name}: {num_prompts} requests, {_sending(request_rate, burstiness)}, "
            f"{lengths.describe()}, seed {seed}" + closed_loop_note(max_concurrency))


def _sending(request_rate: float, burstiness: float) -> str:
    if math.isinf(request_rate):
        return "all sent at t=0"
    if burstiness == 1.0:
        return f"{request_rate:g} req/s Poisson"
    return f"{request_rate:g} req/s, gamma gaps of burstiness {burstiness:g}"


def closed_loop_note(max_concurrency: Optional[int]) -> str:
    if max_concurrency is None:
        return ""
    return f", at most {max_concurrency} in flight (closed loop)"


def json_rate(request_rate):
    """JSON has no infinity; like vllm bench serve's result file, an infinite rate is "inf"
    (anything else, None included, unchanged)."""
    if isinstance(request_rate, float) and math.isinf(request_rate):
        return "inf"
    return request_rate


# -- checks shared by every workload --------------------------------------------------------------

def check_sending(num_prompts: Optional[int], max_concurrency: Optional[int]) -> None:
    if num_prompts is not None:
        NUM_PROMPTS.check("--num-prompts", num_prompts, WorkloadError)
    if max_concurrency is not None:
        NUM_PROMPTS.check("--max-concurrency", max_concurrency, WorkloadError)


def check_arrival_rate(request_rate: float, burstiness: float, seed: int) -> None:
    REQUEST_RATE.check("--request-rate", request_rate, WorkloadError)
    BURSTINESS.check("--burstiness", burstiness, WorkloadError)
    SEED.check("--seed", seed, WorkloadError)
