"""How big a run will be, said before it starts: one line for a long one, a refusal for one the
machine's memory cannot hold.

    servesim: a long run ahead: 10,000,000 requests, 15.3 G prompt and 2.0 G output tokens, about
    33,644,485 engine steps a mode: roughly 20 min a mode on this machine, 1.8 GiB of memory
    (up to 5.2 GiB if the engine cannot keep up and every request waits at once); progress
    follows on a terminal, Ctrl-C stops it and leaves nothing behind

A command that builds many workloads (sweep's points) is announced once, when their estimates
together pass ANNOUNCE_AFTER_S.

The figures come from the first SAMPLE_REQUESTS requests of the workload (drawn again, cheap),
scaled to all of them, and from what one step and one request cost servesim today, measured on
the default workload (`run --num-prompts 20000 --request-rate inf --mode chunked`: 2.5 s of
simulation, 63,457 steps, 4.2 M output tokens, 41 MB; and one request of 400,000 output tokens
on a B300: 3.3 s, 400,001 steps, 56 MB):

    wall time  SECONDS_PER_OUTPUT_TOKEN x output tokens + SECONDS_PER_STEP x steps
    memory     BASE_BYTES + BYTES_PER_REQUEST x requests + BYTES_PER_STEP x steps, plus
               BYTES_PER_WAITING_REQUEST x the requests sent at once (all of them wait at
               first), plus BYTES_PER_CHART_STEP x steps when a chart is drawn (--svg)
    steps      in a continuous mode at least the longest request's tokens (one decode a
               step), the whole workload's tokens through the token budget, and its output
               tokens through max_num_seqs; NAIVE a step per output token; STATIC a batch of
               max_num_seqs until its longest output is done (`num_steps`); of the modes the
               command runs, the slowest

A workload sent over time keeps few requests waiting while the engine keeps up; one it cannot
keep up with queues more and more of them, up to all: the line then says how much that would
take too ("up to ..."), and only the first figure, what the run needs at least, is held against
the machine's memory.

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

SAMPLE_REQUESTS = 256  # enough for a mean within a few percent; cheap for a sweep of many points
SECONDS_PER_OUTPUT_TOKEN = 0.47e-6  # one request scheduled in one step (the default workload)
SECONDS_PER_STEP = 7.8e-6           # one step's own cost, whatever its size (one request alone)
# Memory, from what each holds (`run --format json` of Vidur's setup, 1,024 + 256 tokens +-90%,
# at 5 req/s: 100,000 requests 45 MB, 1,000,000 requests 206 MB, 100,000 with --svg 164 MB):
BASE_BYTES = 25 * 2**20          # the interpreter and servesim's modules (10,000 requests: 30 MB)
BYTES_PER_REQUEST = 150          # its numbers in the recorder's arrays (49 bytes), and at the
#                                  end the latency samples and the sorted last-token times
#                                  (about 50), the peak-tokens counter's share (about 20)
BYTES_PER_WAITING_REQUEST = 370  # a Request object, drawn and waiting (363 bytes measured)
BYTES_PER_STEP = 12              # a distinct inter-token gap, in flat arrays (metrics.GapCounts)
BYTES_PER_CHART_STEP = 480       # StepSeries' sample of every step, for --svg's charts
ANNOUNCE_AFTER_S = 3.0             # a run estimated longer than this is announced
RESERVED_BYTES = 512 * 2**20       # left beyond the estimate: the report, the machine's others


@dataclass(frozen=True)
class RunSize:
    num_requests: int
    prompt_tokens: float
    output_tokens: float
    num_steps: float
    sent_at_once: bool = False  # every request waits at first (a rate of inf, a time scale 0)
    charts: bool = False        # a sample of every step is kept (--svg)

    @property
    def wall_s(self) -> float:
        return SECONDS_PER_OUTPUT_TOKEN * self.output_tokens + SECONDS_PER_STEP * self.num_steps

    @property
    def memory_bytes(self) -> float:
        """What the run needs at least: every request waiting at once only if sent at once."""
        return self._memory_bytes(self.num_requests if self.sent_at_once else 0)

    @property
    def most_memory_bytes(self) -> float:
        """What it needs if every request waits at once (an engine that cannot keep up)."""
        return self._memory_bytes(self.num_requests)

    def _memory_bytes(self, num_waiting: int) -> float:
        per_step = BYTES_PER_STEP + (BYTES_PER_CHART_STEP if self.charts else 0)
        return (BASE_BYTES + BYTES_PER_REQUEST * self.num_requests + per_step * self.num_steps
                + BYTES_PER_WAITING_REQUEST * num_waiting)


def run_size(workload, config, mode=None, charts: bool = False) -> RunSize:
    """The workload's size in `mode` (None: a continuous mode), scaled from its first
    SAMPLE_REQUESTS requests; `charts`: a sample of every step is kept."""
    num_requests = workload.params.get("num_requests") or workload.params.get("num_prompts") or 0
    prompt = output = longest = longest_output = num_sampled = 0
    for request in workload.make_requests():
        prompt += request.prompt_len
        output += request.max_tokens
        longest = max(longest, min(request.prompt_len + request.max_tokens,
                                   config.max_model_len))
        longest_output = max(longest_output, request.max_tokens)
        num_sampled += 1
        if num_sampled == SAMPLE_REQUESTS:
            break
    if not num_sampled:
        return RunSize(0, 0, 0, 0)
    num_requests = max(num_requests, num_sampled)
    scale = num_requests / num_sampled
    prompt_tokens, output_tokens = prompt * scale, output * scale
    return RunSize(num_requests, prompt_tokens, output_tokens,
                   num_steps(mode, config, num_requests, prompt_tokens + output_tokens,
                             output_tokens, longest, longest_output),
                   sent_at_once=workload.known_span_s == 0.0, charts=charts)


def num_steps(mode, config, num_requests, tokens, output_tokens, longest,
              longest_output) -> float:
    """Engine steps, at least: a continuous mode is bounded by its token budget, the longest
    request and max_num_seqs; NAIVE serves one request at a time (a step per output token);
    STATIC runs batches of max_num_seqs until their longest output is done."""
    if mode is None or mode.has_token_budget:
        budget = config.token_budget(enable_chunked_prefill=True)
        return max(longest, tokens / budget, output_tokens / config.max_num_seqs)
    if mode.one_at_a_time:
        return output_tokens + num_requests
    return -(-num_requests // config.max_num_seqs) * (longest_output + 1)


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


class _Command:
    announced = False   # one line a command, however many workloads it builds (sweep's points)
    num_workloads = 0   # built so far by this command, and their estimated wall time
    wall_s = 0.0


def new_command() -> None:
    """commands/cli.py, as a command starts: its first long run will be announced."""
    _Command.announced, _Command.num_workloads, _Command.wall_s = False, 0, 0.0


def check_size(workload, config, modes=(), stream=None, charts: bool = False) -> RunSize:
    """Refuse a run the memory cannot hold; announce a long one in one line on stderr, once a
    command (a sweep's many short points count together). The figures are the slowest of
    `modes`' (none given: a continuous mode's)."""
    size = max((run_size(workload, config, mode, charts) for mode in modes or [None]),
               key=lambda size: size.num_steps)
    available = available_memory_bytes()
    if available is not None and size.memory_bytes > available - RESERVED_BYTES:
        raise ConfigError(
            f"this run would need about {_gib(size.memory_bytes)} of memory "
            f"({size.num_requests:,} requests, about {size.num_steps:,.0f} engine steps), more "
            f"than the {_gib(max(available - RESERVED_BYTES, 0))} this machine can give now; "
            "lower --num-prompts, the lengths or --max-model-len")
    _Command.num_workloads += 1
    _Command.wall_s += size.wall_s
    if _Command.wall_s > ANNOUNCE_AFTER_S and not _Command.announced:
        _Command.announced = True
        stream = stream or sys.stderr
        stream.write(f"servesim: a long run ahead: {_describe(size)}; progress follows on a "
                     "terminal, Ctrl-C stops it and leaves nothing behind\n")
        stream.flush()
    return size


def _describe(size: RunSize) -> str:
    workload = (f"{size.num_requests:,} requests, {_giga(size.prompt_tokens)} prompt and "
                f"{_giga(size.output_tokens)} output tokens, about {size.num_steps:,.0f} engine "
                "steps a mode")
    memory = f"{_gib(size.memory_bytes)} of memory"
    if size.most_memory_bytes > 1.5 * size.memory_bytes:
        memory += (f" (up to {_gib(size.most_memory_bytes)} if the engine cannot keep up and "
                   "every request waits at once)")
    if _Command.num_workloads == 1:
        return (f"{workload}: roughly {_duration(size.wall_s)} a mode on this machine, "
                f"{memory}")
    return (f"{_Command.num_workloads} workloads so far (this one {workload}): roughly "
            f"{_duration(_Command.wall_s)} a mode in all on this machine, {memory} a run")


def _gib(num_bytes: float) -> str:
    if num_bytes < 2**30:
        return f"{num_bytes / 2**20:,.0f} MiB"
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
