"""How big a run will be, said before it starts: one line for a long one, a refusal for one the
machine's memory cannot hold.

    servesim: a long run ahead: 10,000,000 requests, 14.2 G prompt and 2.1 G output tokens, about
    31,600,000 engine steps a mode: roughly 74 min a mode on this machine, 17.4 GiB of memory;
    progress follows on a terminal, Ctrl-C stops it and leaves nothing behind

The figures come from the first SAMPLE_REQUESTS requests of the workload (drawn again, cheap),
scaled to all of them, and from what one step and one request cost servesim today, measured on
the default workload (`run --num-prompts 20000 --request-rate inf --mode chunked`: 9.5 s,
63,456 steps, 4.2 M output tokens, 33 MB above the interpreter's own; and one request of 400,000
output tokens: 18.5 s, 163 MB):

    wall time  SECONDS_PER_OUTPUT_TOKEN x output tokens + SECONDS_PER_STEP x steps
    memory     BYTES_PER_REQUEST x requests + BYTES_PER_STEP x steps  (a per-step sample and
               the run's counters; requests in flight and their records)
    steps      at least the longest request's tokens (one decode a step), the whole
               workload's tokens through the token budget, and its output tokens through
               max_num_seqs

They are rough (a scheduler that stalls takes more steps; a faster engine fewer seconds) and
say so; the memory cap refuses only what could not fit: more than the memory the machine has
available now (MemAvailable in /proc/meminfo, else its physical memory). Lower --num-prompts,
the lengths or --max-model-len to fit. The engine itself never reads the wall clock or the
machine: this is the shell's business.
"""

import os
import sys
from dataclasses import dataclass
from typing import Optional

from config import ConfigError

SAMPLE_REQUESTS = 1000
SECONDS_PER_OUTPUT_TOKEN = 1.5e-6  # one request scheduled in one step (the default workload)
SECONDS_PER_STEP = 40e-6           # one step's own cost, whatever its size (one request alone)
BYTES_PER_REQUEST = 500
BYTES_PER_STEP = 400
ANNOUNCE_AFTER_S = 3.0             # a run estimated longer than this is announced
RESERVED_BYTES = 512 * 2**20       # left to the interpreter, the modules and the report


@dataclass(frozen=True)
class RunSize:
    num_requests: int
    prompt_tokens: float
    output_tokens: float
    num_steps: float

    @property
    def wall_s(self) -> float:
        return SECONDS_PER_OUTPUT_TOKEN * self.output_tokens + SECONDS_PER_STEP * self.num_steps

    @property
    def memory_bytes(self) -> float:
        return BYTES_PER_REQUEST * self.num_requests + BYTES_PER_STEP * self.num_steps


def run_size(workload, config) -> RunSize:
    """The workload's size, scaled from its first SAMPLE_REQUESTS requests."""
    num_requests = workload.params.get("num_requests") or workload.params.get("num_prompts") or 0
    prompt = output = longest = num_sampled = 0
    for request in workload.make_requests():
        prompt += request.prompt_len
        output += request.max_tokens
        longest = max(longest, min(request.prompt_len + request.max_tokens,
                                   config.max_model_len))
        num_sampled += 1
        if num_sampled == SAMPLE_REQUESTS:
            break
    if not num_sampled:
        return RunSize(0, 0, 0, 0)
    scale = max(num_requests, num_sampled) / num_sampled
    prompt_tokens, output_tokens = prompt * scale, output * scale
    budget = config.token_budget(enable_chunked_prefill=True)
    num_steps = max(longest, (prompt_tokens + output_tokens) / budget,
                    output_tokens / config.max_num_seqs)
    return RunSize(max(num_requests, num_sampled), prompt_tokens, output_tokens, num_steps)


def available_memory_bytes() -> Optional[int]:
    """What the machine can give now: MemAvailable (Linux), else its physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class _Announced:
    once = False  # one line a command, however many workloads it builds (sweep's points)


def new_command() -> None:
    """commands/cli.py, as a command starts: its first long run will be announced."""
    _Announced.once = False


def check_size(workload, config, stream=None) -> RunSize:
    """Refuse a run the memory cannot hold; announce a long one in one line on stderr (once a
    command)."""
    size = run_size(workload, config)
    available = available_memory_bytes()
    if available is not None and size.memory_bytes > available - RESERVED_BYTES:
        raise ConfigError(
            f"this run would need about {_gib(size.memory_bytes)} of memory "
            f"({size.num_requests:,} requests, about {size.num_steps:,.0f} engine steps), more "
            f"than the {_gib(max(available - RESERVED_BYTES, 0))} this machine can give now; "
            "lower --num-prompts, the lengths or --max-model-len")
    if size.wall_s > ANNOUNCE_AFTER_S and not _Announced.once:
        _Announced.once = True
        stream = stream or sys.stderr
        stream.write(f"servesim: a long run ahead: {size.num_requests:,} requests, "
                     f"{_giga(size.prompt_tokens)} prompt and {_giga(size.output_tokens)} output "
                     f"tokens, about {size.num_steps:,.0f} engine steps a mode: roughly "
                     f"{_duration(size.wall_s)} a mode on this machine, "
                     f"{_gib(size.memory_bytes)} of memory; progress follows on a terminal, "
                     "Ctrl-C stops it and leaves nothing behind\n")
        stream.flush()
    return size


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:,.1f} GiB"


def _giga(count: float) -> str:
    if count >= 1e9:
        return f"{count / 1e9:,.1f} G"
    return f"{count / 1e6:,.1f} M"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"
