"""Mixed traffic: who sends what, and when.

A workload is a recipe for a stream of requests (arrival time, prompt length, output length),
made fresh for every mode so that each mode serves exactly the same requests. Streams are lazy:
a synthetic generator draws the next request only when the engine's clock reaches it, and a trace
file is read line by line, never loaded whole.

How requests are *sent* is the arrival process (arrivals.py): an open loop at `--request-rate`
with gamma-distributed gaps, or a closed loop of `--max-concurrency` clients.

Every random draw goes through one `random.Random(seed)`: same seed, same requests.
"""

import csv
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from arrivals import ClosedLoopClients, OpenLoopArrivals, arrival_times
from request import Request


class WorkloadError(ValueError):
    """Bad workload input (a trace line, a parameter); the message is one line for the user."""


@dataclass
class Workload:
    name: str                  # "mixed", "trace", ...
    description: str           # one line for the report header
    params: dict               # what the JSON "workload" object reports
    make_requests: Callable[[], Iterator[Request]]  # a fresh stream, in arrival order
    max_concurrency: Optional[int] = None

    def arrivals(self):
        if self.max_concurrency is None:
            return OpenLoopArrivals(self.make_requests())
        return ClosedLoopClients(self.make_requests(), self.max_concurrency)


# -- the default workload -------------------------------------------------------------------------

@dataclass(frozen=True)
class MixedTraffic:
    """Many chat-sized prompts and a few long documents, the traffic the lesson worries about."""
    num_prompts: int = 100
    request_rate: float = 4.0         # requests per second, on average
    burstiness: float = 1.0
    long_fraction: float = 0.1        # share of long-document requests
    short_prompt: tuple = (100, 1500)  # uniform, tokens
    long_prompt: tuple = (6000, 7800)  # "8k-token" documents that still fit max_model_len 8192
    short_output: tuple = (20, 400)
    long_output: tuple = (50, 300)
    seed: int = 0

    def requests(self) -> Iterator[Request]:
        rng = random.Random(self.seed)
        times = arrival_times(rng, self.request_rate, self.burstiness)
        for index in range(self.num_prompts):
            arrival_s = next(times)
            is_long = rng.random() < self.long_fraction
            prompt_range = self.long_prompt if is_long else self.short_prompt
            output_range = self.long_output if is_long else self.short_output
            yield Request(str(index), arrival_s, rng.randint(*prompt_range),
                          rng.randint(*output_range))

    def describe(self) -> str:
        long_pct = round(100 * self.long_fraction)
        return (f"mixed: {self.num_prompts} requests, {self.request_rate:g} req/s Poisson, "
                f"{100 - long_pct}% prompts {self.short_prompt[0]}-{self.short_prompt[1]} tok, "
                f"{long_pct}% {self.long_prompt[0]}-{self.long_prompt[1]} tok, seed {self.seed}")


def mixed_workload(num_prompts: int, request_rate: float, burstiness: float, seed: int,
                   max_concurrency: Optional[int] = None) -> Workload:
    mix = MixedTraffic(num_prompts=num_prompts, request_rate=request_rate,
                       burstiness=burstiness, seed=seed)
    params = {"name": "mixed", "num_prompts": num_prompts, "request_rate": request_rate,
              "burstiness": burstiness, "seed": seed, "max_concurrency": max_concurrency,
              "long_fraction": mix.long_fraction}
    return Workload("mixed", mix.describe(), params, mix.requests, max_concurrency)


# -- trace files ------------------------------------------------------------------------------------

CSV_COLUMNS = ("arrival_s", "prompt_len", "output_len")


def csv_trace_workload(path: str, num_prompts: Optional[int] = None,
                       max_concurrency: Optional[int] = None) -> Workload:
    """A plain CSV trace: header `arrival_s,prompt_len,output_len`, optionally an `id` column."""
    check_csv_header(path)

    def make_requests() -> Iterator[Request]:
        return read_csv_trace(path, num_prompts)

    params = {"name": "trace", "trace": path, "trace_format": "csv", "num_prompts": num_prompts,
              "max_concurrency": max_concurrency}
    return Workload("trace", f"trace {path}", params, make_requests, max_concurrency)


def check_csv_header(path: str) -> None:
    """Fail before any simulation starts if the file is missing or its header is wrong."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None)
    except OSError as error:
        raise WorkloadError(f"{path}: cannot read trace ({error.strerror})") from None
    missing = [c for c in CSV_COLUMNS if header is None or c not in header]
    if missing:
        raise WorkloadError(f"{path}:1: missing column(s) {', '.join(missing)}; the header must "
                            f"name {','.join(CSV_COLUMNS)} (and optionally id)")


def read_csv_trace(path: str, num_prompts: Optional[int] = None) -> Iterator[Request]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        previous_s = 0.0
        for index, row in enumerate(reader):
            if num_prompts is not None and index >= num_prompts:
                return
            line = reader.line_num
            arrival_s = _number(row, "arrival_s", False, 0, path, line)
            if arrival_s < previous_s:
                raise WorkloadError(f"{path}:{line}: arrival_s {arrival_s} goes backwards "
                                    f"(previous {previous_s}); rows must be in arrival order")
            previous_s = arrival_s
            request_id = row.get("id") or str(index)
            yield Request(request_id, arrival_s, _number(row, "prompt_len", True, 1, path, line),
                          _number(row, "output_len", True, 1, path, line))


def _number(row: dict, column: str, integer: bool, minimum: float, path: str, line: int):
    text = row.get(column)
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise WorkloadError(f"{path}:{line}: {column} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise WorkloadError(f"{path}:{line}: {column} must be a number >= {minimum}, got {text}")
    return value
