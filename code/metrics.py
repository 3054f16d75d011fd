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

Beside the latencies, counters that say where a mode's time and tokens went (exercise 1):

    queue time          first scheduled - arrival: waiting for admission (vLLM's
                        request_queue_time); in STATIC, for the running batch to drain
    prompt / decode     STATIC's padding, split: prompts padded to the longest, and finished
      padding           members still computed in every decode step until the batch drains
    idle batch seats    STATIC's empty seats while requests waited, time-averaged
    prefill tokens      tokens computed that were not decodes: prompts less their prefix cache
      computed          hits, recomputation after preemption, STATIC's prompt padding
    recomputed tokens   KV a preemption threw away and computed again on resume (what the
                        request found again in the prefix cache is not computed again)
    prompt time         share of the busy time spent in steps that computed prompt tokens
    decode-only time    share of it spent in steps of decodes alone while requests waited:
      while waiting     memory-bound steps whose idle compute the waiting prompts could have
                        used, had the KV blocks, the token budget or a static batch let them in
    decodes beside      decode tokens computed in a step that also computed prompt tokens:
      prompts           each of them waited for that prompt's work (the ITL chunking shortens)

And, for `diagnose`, what kept WAITING waiting (vLLM V1's scheduler notes it in each step,
batch.AdmissionLimit), as shares of the busy time, and how long the queue was:

    waiting on          steps after which requests waited because the free blocks could not
      KV blocks         hold the head's sequence, or a preemption skipped admission
    waiting on          ... because max_num_seqs requests already ran
      max_num_seqs
    waiting on the      ... because the token budget was spent, on prompt chunks (a prompt
      budget            chunk or a recomputation in the step), or on decodes alone; without
                        chunked prefill, also when the head's whole prompt did not fit it
    queue depth         requests waiting after each step, time-averaged over the busy time,
                        and the most at once (vLLM's gauge num_requests_waiting)
    mean KV use         reserved KV slots, time-averaged, of the pool (peak KV use: the most)
"""

import bisect
import itertools
import math
from array import array
from collections import Counter
from dataclasses import dataclass

from batch import AdmissionLimit, DecodeRun, SchedulerOutput, StepResult
from goodput import add_request_goodput
from request import Request, RequestStatus
from spec_decode import SpecDecodingStats

IN_FLIGHT, FINISHED, REJECTED = 0, 1, 2  # what RunRecorder.status holds per request
# What kept WAITING waiting, as summary() names it: waiting_on_{cause}_pct.
WAITING_CAUSES = ("kv_blocks", "max_num_seqs", "prompt_budget", "decode_budget")


class Distribution:
    """Values and how often each occurred, sorted once: a mean and linear percentiles."""

    def __init__(self, values: list[float], counts: array):
        """`values` sorted and distinct, `counts[i]` how often values[i] occurred."""
        self.values = values
        self.ends = array("q", itertools.accumulate(counts))  # ends[i]: items <= values[i]
        self.total = self.ends[-1] if self.ends else 0
        self._sum = math.fsum(value * count for value, count in zip(values, counts))

    @classmethod
    def of_counts(cls, counts: Counter) -> "Distribution":
        values = sorted(counts)
        return cls(values, array("q", (counts[value] for value in values)))

    @classmethod
    def of_samples(cls, samples) -> "Distribution":
        """From the samples themselves, equal ones counted together (as `of_counts` would)."""
        values, counts = [], array("q")
        for value, run in itertools.groupby(sorted(samples)):
            values.append(value)
            counts.append(sum(1 for _ in run))
        return cls(values, counts)

    def mean(self) -> float:
        return self._sum / self.total if self.total else 0.0

    def percentile(self, p: float) -> float:
        """The p-th percentile (0..100) of the expanded list; 0.0 for no values."""
        if not self.total:
            return 0.0
        rank = p / 100 * (self.total - 1)
        below = math.floor(rank)
        low = self.values[bisect.bisect_right(self.ends, below)]
        high = self.values[bisect.bisect_right(self.ends, min(below + 1, self.total - 1))]
        return low + (high - low) * (rank - below)


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


class RunRecorder:
    """Watches every engine step of one run and keeps what the metrics need."""

    def __init__(self, num_total_kv_slots: int, prefix_caching: bool = False):
        self.num_total_kv_slots = num_total_kv_slots
        self.prefix_caching = prefix_caching
        # -- prefix caching, in tokens, as vLLM counts it: new requests apart from resumed ones --
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prefix_cache_resumed_queries = 0
        self.prefix_cache_resumed_hits = 0
        # -- per request, in arrival order (Request.arrival_index) --
        self.arrival_s = array("d")
        self.prompt_len = array("q")
        self.status = bytearray()
        self.is_scheduled = bytearray()          # 1 once the request got its first tokens
        self.is_sliced = bytearray()             # 1 once a step computed part of its prompt and
        #                                          left the rest for a later step (a chunk)
        self.first_scheduled_s = array("d")      # ... at the start of that step
        self.first_token_s = array("d")
        self.last_token_s = array("d")
        self.num_output_tokens = array("q")
        self.rejected: list[Rejection] = []
        self.num_ended = 0   # finished or rejected so far
        # -- per step --
        self.itl_counts: Counter = Counter()  # seconds -> how many tokens followed that gap
        self.num_steps = 0
        self.num_scheduled_seqs = 0     # summed over steps: mean batch size
        self.num_computed_tokens = 0    # summed over steps, padding included
        self.num_padding_tokens = 0
        self.num_prefill_tokens = 0     # computed tokens that were not decodes: prompts (less
        #                                 their cache hits), recomputation after preemption
        self.num_prompt_padding_tokens = 0
        self.num_decode_tokens = 0
        self.num_decode_tokens_beside_prompts = 0
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0  # summed over ended requests
        self.busy_s = 0.0                 # summed step durations
        self.prompt_busy_s = 0.0          # ... of the steps that computed prompt tokens
        self.decode_only_waiting_s = 0.0  # ... of decode-only steps while requests waited
        self.idle_slot_seconds = 0.0      # STATIC's empty seats while requests waited x how long
        self.reserved_slot_seconds = 0.0  # KV slots reserved x how long
        self.wasted_slot_seconds = 0.0    # reserved but holding no real token
        self.peak_reserved_slots = 0
        # -- what kept WAITING waiting, for diagnose: seconds of the steps after which requests
        #    waited, by what kept the head out (the budget split by what spent it) --
        self.waiting_s: Counter = Counter()  # "kv_blocks", "max_num_seqs", "prompt_budget",
        #                                      "decode_budget" -> seconds
        self.waiting_request_seconds = 0.0   # requests waiting x how long
        self.peak_num_waiting = 0
        self.spec_decoding = SpecDecodingStats()  # drafts verified, with speculative decoding

    def on_arrival(self, request: Request) -> None:
        request.arrival_index = len(self.status)
        self.arrival_s.append(request.arrival_s)
        self.prompt_len.append(request.prompt_len)
        self.status.append(IN_FLIGHT)
        self.is_scheduled.append(0)
        self.is_sliced.append(0)
        for numbers in (self.first_scheduled_s, self.first_token_s, self.last_token_s,
                        self.num_output_tokens):
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
        self.num_recomputed_tokens += request.num_recomputed_tokens
        self.first_token_s[index] = request.first_token_s
        self.last_token_s[index] = request.last_token_s
        self.num_output_tokens[index] = request.num_output_tokens

    def on_step(self, step_s: float, batch: SchedulerOutput, result: StepResult,
                reserved_slots: int, used_slots: int, *, start_s: float, num_waiting: int) -> None:
        """`reserved_slots` and `used_slots` are the KV cache's state while the step ran, which
        began at `start_s` with `num_waiting` requests left waiting."""
        self._count_step(step_s, batch.num_seqs, batch.num_scheduled_tokens,
                         batch.num_padding_tokens, batch.num_decode_tokens, batch.num_idle_slots,
                         reserved_slots, used_slots)
        self.num_prompt_padding_tokens += batch.num_prompt_padding_tokens
        if batch.num_scheduled_tokens > batch.num_decode_tokens:  # prompt tokens in the step
            self.prompt_busy_s += step_s
            self.num_decode_tokens_beside_prompts += batch.num_decode_tokens
        elif num_waiting:
            self.decode_only_waiting_s += step_s
        self.num_preemptions += len(batch.preempted)
        self._count_waiting(step_s, num_waiting, batch.admission_limit,
                            has_prompts=batch.num_scheduled_tokens > batch.num_decode_tokens)
        is_scheduled = self.is_scheduled
        for scheduled in batch.scheduled:  # (decodes counted in bulk are not named: they began long ago)
            index = scheduled.request.arrival_index
            if not is_scheduled[index]:
                is_scheduled[index] = 1
                self.first_scheduled_s[index] = start_s
            computed = scheduled.num_context_tokens + scheduled.num_new_tokens
            if computed < scheduled.request.prompt_len:  # the step stopped inside the prompt
                self.is_sliced[index] = 1
        self.num_prefill_tokens += batch.num_scheduled_tokens - batch.num_decode_tokens
        for lookup in batch.prefix_lookups:
            if lookup.resumed:
                self.prefix_cache_resumed_queries += lookup.num_tokens
                self.prefix_cache_resumed_hits += lookup.num_cached_tokens
            else:
                self.prefix_cache_queries += lookup.num_tokens
                self.prefix_cache_hits += lookup.num_cached_tokens
        itl_counts = self.itl_counts
        for itl_s, count in result.itls:
            itl_counts[itl_s] += count
        for _, num_drafts, num_accepted in result.verified:
            self.spec_decoding.observe_draft(num_drafts, num_accepted)
        for request in result.finished:
            self.on_finished(request)

    def on_decode_run_step(self, step_s: float, run: DecodeRun, itl_s: float,
                           reserved_slots: int, used_slots: int, *, num_waiting: int) -> None:
        """One step of a DecodeRun: what `on_step` records for such a step."""
        self._count_step(step_s, run.num_seqs, run.num_seqs, run.num_padding_tokens,
                         run.num_seqs, run.num_idle_slots, reserved_slots, used_slots)
        self.itl_counts[itl_s] += run.num_sampled
        if num_waiting:
            self.decode_only_waiting_s += step_s
        self._count_waiting(step_s, num_waiting, run.admission_limit, has_prompts=False)

    def _count_waiting(self, step_s: float, num_waiting: int, limit, has_prompts: bool) -> None:
        """`num_waiting` requests were left waiting by a step of `step_s`; `limit` (an
        AdmissionLimit, or None in NAIVE and STATIC) kept the head out."""
        self.waiting_request_seconds += num_waiting * step_s
        if num_waiting > self.peak_num_waiting:
            self.peak_num_waiting = num_waiting
        if limit is AdmissionLimit.TOKEN_BUDGET:
            self.waiting_s["prompt_budget" if has_prompts else "decode_budget"] += step_s
        elif limit is not None:
            self.waiting_s[limit.value] += step_s

    def _count_step(self, step_s: float, num_seqs: int, num_tokens: int, num_padding_tokens: int,
                    num_decode_tokens: int, num_idle_slots: int, reserved_slots: int,
                    used_slots: int) -> None:
        self.num_steps += 1
        self.num_scheduled_seqs += num_seqs
        self.num_computed_tokens += num_tokens
        self.num_padding_tokens += num_padding_tokens
        self.num_decode_tokens += num_decode_tokens
        self.busy_s += step_s
        self.idle_slot_seconds += num_idle_slots * step_s
        self.reserved_slot_seconds += reserved_slots * step_s
        self.wasted_slot_seconds += (reserved_slots - used_slots) * step_s
        if reserved_slots > self.peak_reserved_slots:
            self.peak_reserved_slots = reserved_slots

    def completed(self) -> list[RequestRecord]:
        """The finished requests, in arrival order."""
        return [self.record(i) for i, status in enumerate(self.status) if status == FINISHED]

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

    LATENCY_NAMES = ("ttft", "tpot", "itl", "e2el")

    def latency_distribution(self, name: str) -> Distribution:
        """TTFT, TPOT, ITL or E2EL over the completed requests, in seconds (one at a time: each
        holds a value per request).

        TPOT leaves out requests with a single output token (they have no gap to average), as
        vLLM's mean and percentiles do.
        """
        if name == "itl":
            return Distribution.of_counts(self.itl_counts)
        arrival, first, last = self.arrival_s, self.first_token_s, self.last_token_s
        outputs = self.num_output_tokens
        done = self._completed_indexes()
        if name == "ttft":
            return Distribution.of_samples(first[i] - arrival[i] for i in done)
        if name == "tpot":
            return Distribution.of_samples((last[i] - first[i]) / (outputs[i] - 1)
                                           for i in done if outputs[i] > 1)
        return Distribution.of_samples(last[i] - arrival[i] for i in done)

    def _completed_indexes(self):
        return (i for i, status in enumerate(self.status) if status == FINISHED)

    def summary(self) -> dict:
        """The run's metrics, named as in the JSON README documents (ms, s, per second)."""
        num_completed = self.num_completed
        start_s = min(self.arrival_s, default=0.0)
        last_tokens = (self.last_token_s[i] for i in self._completed_indexes())
        rejected_arrivals = (self.arrival_s[rejection.index] for rejection in self.rejected)
        duration = max(itertools.chain(last_tokens, rejected_arrivals), default=start_s) - start_s
        input_tokens = sum(self.prompt_len[i] for i in self._completed_indexes())
        output_tokens = sum(self.num_output_tokens[i] for i in self._completed_indexes())
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
        for name in self.LATENCY_NAMES:
            distribution = self.latency_distribution(name)
            result[f"mean_{name}_ms"] = 1000 * distribution.mean()
            result[f"median_{name}_ms"] = 1000 * distribution.percentile(50)
            result[f"p99_{name}_ms"] = 1000 * distribution.percentile(99)
        result.update({
            "num_preemptions": self.num_preemptions,
            "num_steps": self.num_steps,
            "kv_waste_pct": _pct(self.wasted_slot_seconds, self.reserved_slot_seconds),
            "peak_kv_usage_pct": _pct(self.peak_reserved_slots, self.num_total_kv_slots),
            "mean_batch_size": self.num_scheduled_seqs / self.num_steps if self.num_steps else 0.0,
            "padding_pct": _pct(self.num_padding_tokens, self.num_computed_tokens),
            "prefill_tokens_computed": self.num_prefill_tokens,
            "prefill_padding_pct": _pct(self.num_prompt_padding_tokens, self.num_computed_tokens),
            "decode_padding_pct": _pct(self.num_padding_tokens - self.num_prompt_padding_tokens,
                                       self.num_computed_tokens),
            "mean_idle_batch_slots": self.idle_slot_seconds / self.busy_s if self.busy_s else 0.0,
            "mean_queue_ms": 1000 * self._mean_queue_s(),
            "num_recomputed_tokens": self.num_recomputed_tokens,
            "recomputed_pct": _pct(self.num_recomputed_tokens, self.num_computed_tokens),
            "prompt_time_pct": _pct(self.prompt_busy_s, self.busy_s),
            "decode_only_waiting_pct": _pct(self.decode_only_waiting_s, self.busy_s),
            "decodes_beside_prompts_pct": _pct(self.num_decode_tokens_beside_prompts,
                                               self.num_decode_tokens),
            "mean_kv_usage_pct": _pct(self.reserved_slot_seconds,
                                      self.busy_s * self.num_total_kv_slots),
            "mean_num_waiting": (self.waiting_request_seconds / self.busy_s if self.busy_s
                                 else 0.0),
            "peak_num_waiting": self.peak_num_waiting,
            "longest_prompt_len": max(self.prompt_len, default=0),
            "num_sliced_prompts": sum(self.is_sliced),
        })
        for cause in WAITING_CAUSES:
            result[f"waiting_on_{cause}_pct"] = _pct(self.waiting_s[cause], self.busy_s)
        if self.prefix_caching:
            result.update({
                "prefix_cache_queries": self.prefix_cache_queries,
                "prefix_cache_hits": self.prefix_cache_hits,
                "prefix_cache_hit_rate": _pct(self.prefix_cache_hits, self.prefix_cache_queries),
                "prefix_cache_resumed_queries": self.prefix_cache_resumed_queries,
                "prefix_cache_resumed_hits": self.prefix_cache_resumed_hits,
            })
        if self.spec_decoding.num_draft_tokens:  # as vLLM, only when drafts were verified
            result.update(self.spec_decoding.metrics())
        return result

    def _mean_queue_s(self) -> float:
        """Mean time from arrival to first scheduled, over the completed requests."""
        waits = [self.first_scheduled_s[i] - self.arrival_s[i] for i in self._completed_indexes()]
        return math.fsum(waits) / len(waits) if waits else 0.0

    def rejections(self) -> list[Rejection]:
        return self.rejected


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
    for name in recorder.LATENCY_NAMES:
        distribution = recorder.latency_distribution(name)
        for p in percentiles:
            result[f"p{percentile_name(p)}_{name}_ms"] = 1000 * distribution.percentile(p)
    result["max_output_tokens_per_s"] = max_output_tokens_per_s
    result["max_concurrent_requests"] = peak_concurrent_requests(recorder.completed())
    return result


def peak_concurrent_requests(completed: list) -> int:
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
