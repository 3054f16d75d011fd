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
exactly what the expanded list would.
"""

import bisect
import math
from collections import Counter

from batch import SchedulerOutput, StepResult
from goodput import add_request_goodput
from request import Request, RequestStatus


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) of `values`, linear interpolation; 0.0 for no values."""
    return weighted_percentile(Counter(values), p)


def weighted_percentile(counts: Counter, p: float) -> float:
    """Percentile of the list in which each value appears `counts[value]` times."""
    if not counts:
        return 0.0
    values = sorted(counts)
    ends = []  # ends[i]: how many items are <= values[i]
    total = 0
    for value in values:
        total += counts[value]
        ends.append(total)
    rank = p / 100 * (total - 1)
    below = math.floor(rank)
    low = values[bisect.bisect_right(ends, below)]
    high = values[bisect.bisect_right(ends, min(below + 1, total - 1))]
    return low + (high - low) * (rank - below)


def weighted_mean(counts: Counter) -> float:
    """Exactly rounded (math.fsum): the mean does not depend on the order values came in."""
    total = sum(counts.values())
    return math.fsum(v * c for v, c in counts.items()) / total if total else 0.0


class RunRecorder:
    """Watches every engine step of one run and keeps what the metrics need."""

    def __init__(self, num_total_kv_slots: int):
        self.num_total_kv_slots = num_total_kv_slots
        self.requests: list[Request] = []
        self.itl_counts: Counter = Counter()  # seconds -> how many tokens followed that gap
        self.num_steps = 0
        self.num_scheduled_seqs = 0     # summed over steps: mean batch size
        self.num_computed_tokens = 0    # summed over steps, padding included
        self.num_padding_tokens = 0
        self.num_preemptions = 0
        self.reserved_slot_seconds = 0.0  # KV slots reserved x how long
        self.wasted_slot_seconds = 0.0    # reserved but holding no real token
        self.peak_reserved_slots = 0

    def on_arrival(self, request: Request) -> None:
        self.requests.append(request)

    def on_step(self, step_s: float, batch: SchedulerOutput, result: StepResult,
                reserved_slots: int, used_slots: int) -> None:
        """`reserved_slots` and `used_slots` are the KV cache's state while the step ran."""
        self.num_steps += 1
        self.num_scheduled_seqs += len(batch.scheduled)
        self.num_computed_tokens += batch.num_scheduled_tokens
        self.num_padding_tokens += batch.num_padding_tokens
        self.num_preemptions += len(batch.preempted)
        itl_counts = self.itl_counts
        for itl_s in result.itls_s:
            itl_counts[itl_s] += 1
        self.reserved_slot_seconds += reserved_slots * step_s
        self.wasted_slot_seconds += (reserved_slots - used_slots) * step_s
        self.peak_reserved_slots = max(self.peak_reserved_slots, reserved_slots)

    def completed(self) -> list[Request]:
        return [r for r in self.requests if r.status is RequestStatus.FINISHED]

    def latency_counts(self) -> dict[str, Counter]:
        """Seconds -> how many times, for TTFT, TPOT, ITL and E2EL over the completed requests.

        TPOT leaves out requests with a single output token (they have no gap to average), as
        vLLM's mean and percentiles do.
        """
        done = self.completed()
        return {
            "ttft": Counter(r.first_token_s - r.arrival_s for r in done),
            "tpot": Counter((r.last_token_s - r.first_token_s) / (r.num_output_tokens - 1)
                            for r in done if r.num_output_tokens > 1),
            "itl": self.itl_counts,
            "e2el": Counter(r.last_token_s - r.arrival_s for r in done),
        }

    def summary(self) -> dict:
        """The run's metrics, named as in the JSON README documents (ms, s, per second)."""
        done = self.completed()
        rejected = self.rejections()
        start_s = min((r.arrival_s for r in self.requests), default=0.0)
        end_s = max([r.last_token_s for r in done] + [r.arrival_s for r in rejected],
                    default=start_s)
        duration = end_s - start_s
        input_tokens = sum(r.prompt_len for r in done)
        output_tokens = sum(r.num_output_tokens for r in done)
        result = {
            "completed": len(done),
            "rejected": len(rejected),
            "duration": duration,
            "total_input_tokens": input_tokens,
            "total_output_tokens": output_tokens,
            "request_throughput": _per_second(len(done), duration),
            "output_throughput": _per_second(output_tokens, duration),
            "total_token_throughput": _per_second(input_tokens + output_tokens, duration),
        }
        for name, counts in self.latency_counts().items():
            result[f"mean_{name}_ms"] = 1000 * weighted_mean(counts)
            result[f"median_{name}_ms"] = 1000 * weighted_percentile(counts, 50)
            result[f"p99_{name}_ms"] = 1000 * weighted_percentile(counts, 99)
        result.update({
            "num_preemptions": self.num_preemptions,
            "num_steps": self.num_steps,
            "kv_waste_pct": _pct(self.wasted_slot_seconds, self.reserved_slot_seconds),
            "peak_kv_usage_pct": _pct(self.peak_reserved_slots, self.num_total_kv_slots),
            "mean_batch_size": self.num_scheduled_seqs / self.num_steps if self.num_steps else 0.0,
            "padding_pct": _pct(self.num_padding_tokens, self.num_computed_tokens),
        })
        return result

    def rejections(self) -> list[Request]:
        return [r for r in self.requests if r.status is RequestStatus.REJECTED]


def percentile_name(p: float) -> str:
    """How vLLM writes a percentile in labels and JSON keys: 99.0 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def serving_metrics(recorder: RunRecorder, percentiles: list[float], slos_ms: dict[str, float],
                    max_output_tokens_per_s: float) -> dict:
    """`summary()` plus what `vllm bench serve` adds for one run, under vLLM's JSON names.

    `p{P}_{metric}_ms` for every percentile asked for (`--metric-percentiles`), `request_goodput`
    when SLOs were given (`--goodput`), and the two peaks vLLM prints: the most output tokens in
    one second (measured by an observer, see timeseries.py) and the most requests in flight.
    """
    result = add_request_goodput(recorder.summary(), recorder, slos_ms)
    for name, counts in recorder.latency_counts().items():
        for p in percentiles:
            result[f"p{percentile_name(p)}_{name}_ms"] = 1000 * weighted_percentile(counts, p)
    result["max_output_tokens_per_s"] = max_output_tokens_per_s
    result["max_concurrent_requests"] = peak_concurrent_requests(recorder.completed())
    return result


def peak_concurrent_requests(completed: list[Request]) -> int:
    """Most completed requests in flight at once, each over [arrival, last token).

    As `vllm bench serve` counts it: a sweep over start and end events in time order, where an
    end at the same instant as a start comes first (the intervals are half-open).
    """
    starts = [(r.arrival_s, 1) for r in completed]
    ends = [(r.last_token_s, -1) for r in completed]
    in_flight = peak = 0
    for _, change in sorted(starts + ends):  # (t, -1) sorts before (t, +1): ends first
        in_flight += change
        peak = max(peak, in_flight)
    return peak


def _per_second(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
