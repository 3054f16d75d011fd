"""TTFT, TPOT, ITL, E2EL and throughput, defined as `vllm bench serve` defines them.

For a request that arrived at `arrival_s` and got its tokens at t1 < t2 < ... < tn:

    TTFT  = t1 - arrival_s                 time to first token (queueing + prefill)
    ITL   = t2 - t1, t3 - t2, ...          every inter-token gap, pooled over all requests
    TPOT  = (tn - t1) / (n - 1)            mean time per output token after the first (n > 1)
    E2EL  = tn - arrival_s                 end-to-end latency

Throughputs divide by the run's duration: first arrival to last token (or to the last arrival,
if a rejected request came later). Percentiles interpolate linearly between the two nearest
ranks, like numpy's default, so P50 of [1, 2, 3, 4] is 2.5. Means are exactly rounded sums
(`math.fsum`), so they do not depend on the order values were recorded in.

ITLs are many (one per output token), so the recorder counts equal gaps once: a decode step of
64 requests adds "step_ms x 64", not 64 entries. Percentiles over (value, count) pairs give
exactly what the expanded list would. And the recorder keeps no request: when one ends, it
notes its numbers (arrival, prompt length, when it was first scheduled, first and last token
time, output tokens) in arrays, so memory stays flat with the number of requests.

With speculative decoding a step can give a request several tokens at once (accepted drafts
and the target's own). A client streaming the answer receives them together, so `vllm bench
serve` records one gap for them, and so does servesim: ITL counts gaps between arrivals of
output, TPOT divides by tokens. The drafts' counters are vLLM's (spec_decode.SpecDecodingStats).

What the engine did step by step (steps, padding, preemptions, KV use, what kept requests
waiting) is counted apart, in engine_counters.py; `RunRecorder` feeds both halves.
"""

import bisect
import itertools
import math
import operator
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from batch import DecodeRun, SchedulerOutput, StepResult
from engine_counters import EngineCounters
from goodput import add_request_goodput
from request import Request, RequestStatus

IN_FLIGHT, FINISHED, REJECTED = 0, 1, 2  # what RunRecorder.status holds per request
LATENCY_NAMES = ("ttft", "tpot", "itl", "e2el")
MANY = 1 << 16  # beyond this many values, a distribution is kept in flat arrays, not sorted
MAX_PIECE = (1 << 32) - 1  # the largest count a gap array holds


class Distribution:
    """Values and how often each occurred, sorted once: a mean and linear percentiles."""

    def __init__(self, values: list[float], counts: array):
        """`values` sorted and distinct, `counts[i]` how often values[i] occurred."""
        self.values = values
        self.ends = array("q", itertools.accumulate(counts))  # ends[i]: items <= values[i]
        self.total = self.ends[-1] if self.ends else 0
        self._sum = math.fsum(map(operator.mul, values, counts))  # each value x its count

    @classmethod
    def of_counts(cls, counts: Counter) -> "Distribution":
        values = sorted(counts)
        return cls(values, array("q", map(counts.__getitem__, values)))

    @classmethod
    def of_samples(cls, samples) -> "Distribution":
        """From the samples themselves, equal ones counted together."""
        return cls.of_counts(Counter(samples))

    def mean(self) -> float:
        return self._sum / self.total if self.total else 0.0

    def percentiles(self, ps: list[float]) -> list[float]:
        return [self.percentile(p) for p in ps]

    def percentile(self, p: float) -> float:
        """The p-th percentile (0..100) of the expanded list; 0.0 for no values."""
        if not self.total:
            return 0.0
        rank = p / 100 * (self.total - 1)
        below = math.floor(rank)
        low = self.values[bisect.bisect_right(self.ends, below)]
        high = self.values[bisect.bisect_right(self.ends, min(below + 1, self.total - 1))]
        return low + (high - low) * (rank - below)


class GapCounts:
    """Every inter-token gap of a run, as (seconds, how many tokens followed it), in bounded room.

    A run has about one distinct gap per engine step, so a million-request run has millions. The
    recorder counts them in a Counter (`live`) as long as it stays under `LIVE_LIMIT` distinct
    gaps (every run of a few tens of thousands of requests); beyond, it moves them, `LIVE_LIMIT`
    at a time, into two flat arrays (12 bytes a gap instead of ~100 in a Counter). Percentiles
    stay exact either way (`ArrayDistribution` selects the value at each rank); the mean is then
    the exactly rounded sum of the stored gap x count products (a gap that recurs in two batches
    is multiplied twice, so the last digit may differ from a Counter's single product).
    """
    LIVE_LIMIT = MANY

    def __init__(self):
        self.live: Counter = Counter()  # seconds -> tokens that followed that gap
        self.values = array("d")        # moved out of `live`: gaps (s) ...
        self.counts = array("I")        # ... and their counts (4 bytes: 2^32 - 1 at most)

    def add(self, itl_s: float, count: int) -> None:
        self.live[itl_s] += count

    def add_each(self, itls_s: list[float], count: int) -> None:
        """Gaps of steps in a row, each followed by `count` tokens (bounded after each, as
        step after step would be)."""
        live = self.live
        for itl_s in itls_s:
            live[itl_s] = live.get(itl_s, 0) + count
            if len(live) >= self.LIVE_LIMIT:
                self._move_live()

    def bound(self) -> None:
        """Called after each step: move the gaps out of the Counter once it holds too many."""
        if len(self.live) >= self.LIVE_LIMIT:
            self._move_live()

    def _move_live(self) -> None:
        self.values.extend(self.live.keys())
        try:
            self.counts.extend(self.live.values())
        except OverflowError:  # a count of 2^32 tokens or more: in pieces that fit
            del self.values[len(self.counts):]
            for value, count in self.live.items():
                while count:
                    piece = min(count, MAX_PIECE)
                    self.values.append(value)
                    self.counts.append(piece)
                    count -= piece
        self.live.clear()

    @property
    def num_tokens(self) -> int:
        """Tokens that followed a gap (every output token but each request's first)."""
        return sum(self.live.values()) + sum(self.counts)

    def distribution(self):
        if not self.values:
            return Distribution.of_counts(self.live)
        self._move_live()
        return ArrayDistribution(self.values, self.counts)


class ArrayDistribution:
    """`Distribution`'s mean and percentiles of (value, count) pairs kept unsorted in arrays
    (`counts` None: each value once), without sorting them all: the value at a rank is found in
    two passes, the first counting items into NUM_BUCKETS equal ranges of value (each item's
    range noted, 2 bytes an item), the second sorting the one range it falls in (kept: the rank
    after it is usually in it too). The passes are the built-ins' own loops (map, compress):
    a million values take a fraction of a second, not a Python call each. The mean is the
    exactly rounded sum of the value x count products (a Counter multiplies a recurring value
    once, by all its count: the last digit may differ)."""
    NUM_BUCKETS = 1 << 16

    def __init__(self, values: array, counts: Optional[array] = None):
        self.values, self.counts = values, counts
        self.total = len(values) if counts is None else sum(counts)
        low, high = min(values), max(values)
        scale = (self.NUM_BUCKETS - 1) / (high - low) if high > low else 0.0
        # each value's range: int((value - low) * scale), in order
        self.buckets = array("H", map(int, map(scale.__mul__, map(low.__rsub__, values))))
        bucket_counts = array("q", bytes(8 * self.NUM_BUCKETS))
        if counts is None:
            for bucket, count in Counter(self.buckets).items():
                bucket_counts[bucket] = count
        else:
            for bucket, count in zip(self.buckets, counts):
                bucket_counts[bucket] += count
        self.bucket_ends = array("q", itertools.accumulate(bucket_counts))
        self._sorted_buckets: dict[int, Distribution] = {}  # range -> its values, sorted

    def mean(self) -> float:
        if self.counts is None:
            return math.fsum(self.values) / self.total
        return math.fsum(map(operator.mul, self.values, self.counts)) / self.total

    def percentile(self, p: float) -> float:
        rank, below, above = self._ranks(p)
        low, high = self._value_at(below), self._value_at(above)
        return low + (high - low) * (rank - below)

    def _ranks(self, p: float) -> tuple[float, int, int]:
        """The p-th percentile's rank, and the two whole ranks either side of it."""
        rank = p / 100 * (self.total - 1)
        below = math.floor(rank)
        return rank, below, min(below + 1, self.total - 1)

    def percentiles(self, ps: list[float]) -> list[float]:
        """percentile(p) for each of `ps`; the ranges their ranks fall in, when more than two,
        are gathered in one pass over the values (rather than one pass each)."""
        ranks = [rank for p in ps for rank in self._ranks(p)[1:]]
        wanted = {self._bucket_of(rank) for rank in ranks} - self._sorted_buckets.keys()
        if len(wanted) > 2:
            inside = {bucket: Counter() for bucket in wanted}
            for (value, count), bucket in zip(self._pairs(), self.buckets):
                if bucket in inside:
                    inside[bucket][value] += count
            for bucket, counts in inside.items():
                self._sorted_buckets[bucket] = Distribution.of_counts(counts)
        return [self.percentile(p) for p in ps]

    def _bucket_of(self, rank: int) -> int:
        return bisect.bisect_right(self.bucket_ends, rank)

    def _value_at(self, rank: int) -> float:
        """The value at 0-based `rank` of the expanded, sorted list."""
        bucket = self._bucket_of(rank)
        before = self.bucket_ends[bucket - 1] if bucket else 0
        in_bucket = self._sorted_buckets.get(bucket)
        if in_bucket is None:
            in_bucket = self._sorted_buckets[bucket] = self._bucket_distribution(bucket)
        return in_bucket.values[bisect.bisect_right(in_bucket.ends, rank - before)]

    def _pairs(self):
        if self.counts is None:
            return zip(self.values, itertools.repeat(1))
        return zip(self.values, self.counts)

    def _bucket_distribution(self, bucket: int) -> Distribution:
        """The values in range `bucket`, with their counts, sorted."""
        selected = map(bucket.__eq__, self.buckets)
        if self.counts is None:
            return Distribution.of_samples(itertools.compress(self.values, selected))
        inside = Counter()
        for value, count in itertools.compress(zip(self.values, self.counts), selected):
            inside[value] += count
        return Distribution.of_counts(inside)


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) of `values`, linear interpolation; 0.0 for no values."""
    return Distribution.of_samples(values).percentile(p)


def weighted_percentile(counts: Counter, p: float) -> float:
    """Percentile of the list in which each value appears `counts[value]` times."""
    return Distribution.of_counts(counts).percentile(p)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What the recorder kept of one request, by its arrival order (`index`)."""
    index: int
    arrival_s: float
    prompt_len: int
    status: int                    # FINISHED or REJECTED
    first_token_s: float = 0.0     # FINISHED only
    last_token_s: float = 0.0      # FINISHED only
    num_output_tokens: int = 0     # FINISHED only


@dataclass(frozen=True)
class Rejection:
    index: int          # arrival order
    request_id: str
    reject_reason: str
    prompt_len: int


class LatencyRecorder:
    """What `vllm bench serve` reports of a run: each request's token times and every gap."""

    def __init__(self):
        # -- per request, in arrival order (Request.arrival_index) --
        self.arrival_s = array("d")
        self.prompt_len = array("q")
        self.status = bytearray()
        self.first_token_s = array("d")
        self.last_token_s = array("d")
        self.num_output_tokens = array("q")
        self.rejected: list[Rejection] = []
        self.num_ended = 0   # finished or rejected so far
        self.itl_gaps = GapCounts()  # seconds -> how many tokens followed that gap

    def on_arrival(self, request: Request) -> None:
        request.arrival_index = len(self.status)
        self.arrival_s.append(request.arrival_s)
        self.prompt_len.append(request.prompt_len)
        self.status.append(IN_FLIGHT)
        for numbers in (self.first_token_s, self.last_token_s, self.num_output_tokens):
            numbers.append(0)

    def on_finished(self, request: Request) -> None:
        """`request` ended: it finished (all its tokens out) or was rejected."""
        index = request.arrival_index
        self.num_ended += 1
        if request.status is RequestStatus.REJECTED:
            self.status[index] = REJECTED
            self.rejected.append(Rejection(index, request.request_id, request.reject_reason,
                                           request.prompt_len))
            return
        self.status[index] = FINISHED
        self.first_token_s[index] = request.first_token_s
        self.last_token_s[index] = request.last_token_s
        self.num_output_tokens[index] = request.num_output_tokens

    def on_gaps(self, itls) -> None:
        """A step's inter-token gaps: (seconds, how many tokens followed that gap) pairs."""
        live = self.itl_gaps.live
        for itl_s, count in itls:
            live[itl_s] = live.get(itl_s, 0) + count  # (a Counter's += calls __missing__)
        self.itl_gaps.bound()

    def completed(self) -> list[RequestRecord]:
        """The finished requests, in arrival order."""
        return list(self.iter_completed())

    def iter_completed(self) -> Iterator[RequestRecord]:
        """The finished requests, in arrival order, one at a time (a million records at once
        would hold a hundred MB or more)."""
        return (self.record(i) for i, status in enumerate(self.status) if status == FINISHED)

    def record(self, index: int) -> RequestRecord:
        if self.status[index] != FINISHED:
            return RequestRecord(index, self.arrival_s[index], self.prompt_len[index],
                                 self.status[index])
        return RequestRecord(index, self.arrival_s[index], self.prompt_len[index], FINISHED,
                             self.first_token_s[index], self.last_token_s[index],
                             self.num_output_tokens[index])

    @property
    def num_completed(self) -> int:
        return self.status.count(FINISHED)


    def latency_distribution(self, name: str) -> Distribution:
        """TTFT, TPOT, ITL or E2EL over the completed requests, in seconds (one at a time: each
        holds a value per request).

        TPOT leaves out requests with a single output token (they have no gap to average), as
        vLLM's mean and percentiles do.
        """
        if name == "itl":
            return self.itl_gaps.distribution()
        done = self._of_completed
        if name == "ttft":
            samples = array("d", map(operator.sub, done(self.first_token_s),
                                     done(self.arrival_s)))
        elif name == "tpot":
            samples = array("d", ((last - first) / (outputs - 1) for first, last, outputs
                                  in zip(done(self.first_token_s), done(self.last_token_s),
                                         done(self.num_output_tokens)) if outputs > 1))
        else:
            samples = array("d", map(operator.sub, done(self.last_token_s),
                                     done(self.arrival_s)))
        if len(samples) > MANY:  # sorting them would take ~64 bytes a value
            return ArrayDistribution(samples)
        return Distribution.of_samples(samples)

    def _of_completed(self, numbers: array):
        """`numbers`' entries of the completed requests, in arrival order."""
        return itertools.compress(numbers, map(FINISHED.__eq__, self.status))

    def summary(self) -> dict:
        """What `vllm bench serve` reports, named as in its JSON (ms, s, per second)."""
        num_completed = self.num_completed
        start_s = min(self.arrival_s, default=0.0)
        last_tokens = self._of_completed(self.last_token_s)
        rejected_arrivals = (self.arrival_s[rejection.index] for rejection in self.rejected)
        duration = max(itertools.chain(last_tokens, rejected_arrivals), default=start_s) - start_s
        input_tokens = sum(self._of_completed(self.prompt_len))
        output_tokens = sum(self._of_completed(self.num_output_tokens))
        result = {
            "completed": num_completed,
            "rejected": len(self.rejected),
            "duration": duration,
            "total_input_tokens": input_tokens,
            "total_output_tokens": output_tokens,
            "request_throughput": _per_second(num_completed, duration),
            "output_throughput": _per_second(output_tokens, duration),
            "total_token_throughput": _per_second(input_tokens + output_tokens, duration),
        }
        for name in LATENCY_NAMES:
            distribution = self.latency_distribution(name)
            result[f"mean_{name}_ms"] = 1000 * distribution.mean()
            result[f"median_{name}_ms"] = 1000 * distribution.percentile(50)
            result[f"p99_{name}_ms"] = 1000 * distribution.percentile(99)
        return result

    def rejections(self) -> list[Rejection]:
        return self.rejected


class RunRecorder:
    """Watches every engine step of one run and keeps what the metrics need, in two halves:
    what `vllm bench serve` reports (`latencies`, above) and what the engine did, for the
    exercises and `diagnose` (`counters`, engine_counters.py). `summary()` lists both."""

    def __init__(self, num_total_kv_slots: int, prefix_caching: bool = False):
        self.latencies = LatencyRecorder()
        self.counters = EngineCounters(num_total_kv_slots, prefix_caching)

    def on_arrival(self, request: Request) -> None:
        self.latencies.on_arrival(request)
        self.counters.on_arrival(request)

    def on_finished(self, request: Request) -> None:
        self.latencies.on_finished(request)
        self.counters.on_finished(request)

    def on_step(self, step_s: float, batch: SchedulerOutput, result: StepResult,
                reserved_slots: int, used_slots: int, *, start_s: float, num_waiting: int) -> None:
        """`reserved_slots` and `used_slots` are the KV cache's state while the step ran, which
        began at `start_s` with `num_waiting` requests left waiting."""
        self.counters.on_step(step_s, batch, result, reserved_slots, used_slots,
                              start_s=start_s, num_waiting=num_waiting)
        self.latencies.on_gaps(result.itls)
        for request in result.finished:
            self.on_finished(request)

    def on_decode_run(self, run: DecodeRun, steps: list[tuple[float, int, int]],
                      itls_s: list[float], *, num_waiting: int) -> None:
        """Steps of a DecodeRun, in order: each (seconds, KV slots reserved, KV slots used)
        and the gap before its tokens: what `on_step` records for each such step."""
        self.counters.on_decode_run(run, steps, num_waiting=num_waiting)
        self.latencies.itl_gaps.add_each(itls_s, run.num_sampled)

    def summary(self) -> dict:
        """The run's metrics, named as in the JSON README documents (ms, s, per second)."""
        return {**self.latencies.summary(), **self.counters.summary()}

    # -- what commands read of each half --

    @property
    def num_steps(self) -> int:
        return self.counters.num_steps

    @property
    def num_completed(self) -> int:
        return self.latencies.num_completed

    @property
    def num_ended(self) -> int:
        return self.latencies.num_ended

    @property
    def status(self) -> bytearray:
        return self.latencies.status

    @property
    def itl_gaps(self) -> GapCounts:
        return self.latencies.itl_gaps

    def completed(self) -> list[RequestRecord]:
        return self.latencies.completed()

    def iter_completed(self) -> Iterator[RequestRecord]:
        return self.latencies.iter_completed()

    def record(self, index: int) -> RequestRecord:
        return self.latencies.record(index)

    def latency_distribution(self, name: str):
        return self.latencies.latency_distribution(name)

    def rejections(self) -> list[Rejection]:
        return self.latencies.rejections()


def percentile_name(p: float) -> str:
    """How vLLM writes a percentile in labels and JSON keys: 99.0 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def serving_metrics(recorder: RunRecorder, percentiles: list[float], slos_ms: dict[str, float],
                    max_output_tokens_per_s: float) -> dict:
    """`summary()` plus what `vllm bench serve` adds for one run, under vLLM's JSON names.

    `p{P}_{metric}_ms` for every percentile asked for (`--metric-percentiles`), `request_goodput`
    when SLOs were given (`--goodput`), and the two peaks vLLM prints: the most output tokens in
    one second (measured by an observer, see reports/timeseries.py) and the most requests in
    flight.
    """
    result = add_request_goodput(recorder.summary(), recorder, slos_ms)
    for name in LATENCY_NAMES:
        values = recorder.latency_distribution(name).percentiles(percentiles)
        for p, value in zip(percentiles, values):
            result[f"p{percentile_name(p)}_{name}_ms"] = 1000 * value
    result["max_output_tokens_per_s"] = max_output_tokens_per_s
    result["max_concurrent_requests"] = peak_concurrent_requests(recorder.iter_completed())
    return result


def peak_concurrent_requests(completed: Iterable) -> int:
    """Most completed requests in flight at once, each over [arrival, last token).

    As `vllm bench serve` counts it: a sweep over start and end events in time order, where an
    end at the same instant as a start comes first (the intervals are half-open). Starts and
    ends are sorted apart (floats in arrays, not an event tuple each), then merged; the starts,
    in arrival order, are sorted already.
    """
    starts_s, ends_s = array("d"), array("d")
    for record in completed:
        starts_s.append(record.arrival_s)
        ends_s.append(record.last_token_s)
    if not all(map(operator.le, starts_s, itertools.islice(starts_s, 1, None))):
        starts_s = array("d", sorted(starts_s))
    ends_s = array("d", sorted(ends_s))
    peak = num_ended = 0
    for num_started, start_s in enumerate(starts_s, 1):
        while num_ended < len(ends_s) and ends_s[num_ended] <= start_s:  # ends first
            num_ended += 1
        peak = max(peak, num_started - num_ended)
    return peak


def _per_second(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
