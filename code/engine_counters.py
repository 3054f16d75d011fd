"""What the engine did, step by step, beside what `vllm bench serve` reports (metrics.py): the
counters that say where a mode's time and tokens went (exercise 1), and what `diagnose` reads.



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

`RunRecorder` (metrics.py) feeds both halves; `summary()` lists these after the latencies.
"""

import math
from collections import Counter
from typing import Optional

from batch import AdmissionLimit, DecodeRun, SchedulerOutput, StepResult
from request import Request, RequestStatus
from spec_decode import SpecDecodingStats

# What kept WAITING waiting, as summary() names it: waiting_on_{cause}_pct.
WAITING_CAUSES = ("kv_blocks", "max_num_seqs", "prompt_budget", "decode_budget")


class ExactSum:
    """A running sum of floats kept exact (Shewchuk's partials, the algorithm math.fsum uses),
    so that `value()` is math.fsum of every value added, without keeping the values."""

    def __init__(self):
        self.partials: list[float] = []  # non-overlapping; their exact sum is the sum so far

    def add(self, x: float) -> None:
        kept = 0
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low:
                self.partials[kept] = low
                kept += 1
            x = high
        del self.partials[kept:]
        self.partials.append(x)

    def value(self) -> float:
        return math.fsum(self.partials)


class EngineCounters:
    """Counts every engine step of one run (and what a preemption cost each request)."""

    def __init__(self, num_total_kv_slots: int, prefix_caching: bool = False):
        self.num_total_kv_slots = num_total_kv_slots
        self.prefix_caching = prefix_caching
        # -- prefix caching, in tokens, as vLLM counts it: new requests apart from resumed ones --
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prefix_cache_resumed_queries = 0
        self.prefix_cache_resumed_hits = 0
        # -- queue time (Request.first_scheduled_s - arrival), over completed requests --
        self.queue_s = ExactSum()
        self.num_queued = 0
        # -- per step --
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
        self.longest_prompt_len = 0     # of the requests that arrived
        self.num_sliced_prompts = 0     # prompts whose first step stopped inside them (a chunk)
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
        self.longest_prompt_len = max(self.longest_prompt_len, request.prompt_len)

    def on_finished(self, request: Request) -> None:
        if request.status is RequestStatus.REJECTED:
            return
        self.num_recomputed_tokens += request.num_recomputed_tokens
        self.queue_s.add(request.first_scheduled_s - request.arrival_s)
        self.num_queued += 1

    def on_step(self, step_s: float, batch: SchedulerOutput, result: StepResult,
                reserved_slots: int, used_slots: int, *, start_s: float, num_waiting: int) -> None:
        """`reserved_slots` and `used_slots` are the KV cache's state while the step ran, which
        began at `start_s` with `num_waiting` requests left waiting."""
        self._count_steps(((step_s, reserved_slots, used_slots),), batch.num_seqs,
                          batch.num_scheduled_tokens, batch.num_padding_tokens,
                          batch.num_decode_tokens, batch.num_idle_slots, num_waiting,
                          batch.admission_limit)
        self.num_prompt_padding_tokens += batch.num_prompt_padding_tokens
        self.num_preemptions += len(batch.preempted)
        for scheduled in batch.scheduled:  # (decodes counted in bulk are not named: they began
            #                               long ago)
            request = scheduled.request
            if request.first_scheduled_s is None:
                # start_s is the step's end less its length, (t + d) - d, which rounding can put
                # an ulp before an arrival at t: a queue time is never below zero.
                request.first_scheduled_s = max(start_s, request.arrival_s)
                computed = scheduled.num_context_tokens + scheduled.num_new_tokens
                if computed < request.prompt_len:  # the step stopped inside the prompt
                    self.num_sliced_prompts += 1
        for lookup in batch.prefix_lookups:
            if lookup.resumed:
                self.prefix_cache_resumed_queries += lookup.num_tokens
                self.prefix_cache_resumed_hits += lookup.num_cached_tokens
            else:
                self.prefix_cache_queries += lookup.num_tokens
                self.prefix_cache_hits += lookup.num_cached_tokens
        for _, num_drafts, num_accepted in result.verified:
            self.spec_decoding.observe_draft(num_drafts, num_accepted)

    def on_decode_run(self, run: DecodeRun, steps: list[tuple[float, int, int]], *,
                      num_waiting: int) -> None:
        """Steps of a DecodeRun, in order, each (seconds, reserved slots, used slots): what
        `on_step` records for each such step (the same batch, with `num_waiting` waiting)."""
        num_decodes = run.num_seqs
        self._count_steps(steps, num_decodes + (run.prompt is not None),
                          num_decodes + run.num_prompt_tokens, run.num_padding_tokens,
                          num_decodes, run.num_idle_slots, num_waiting, run.admission_limit)

    def _count_steps(self, steps, num_seqs: int, num_tokens: int, num_padding_tokens: int,
                     num_decode_tokens: int, num_idle_slots: int, num_waiting: int,
                     limit: Optional[AdmissionLimit]) -> None:
        """Steps of one batch, each (seconds, KV slots reserved, KV slots used) in order, after
        each of which `num_waiting` requests were left waiting (`limit` kept the head out: an
        AdmissionLimit, or None in NAIVE and STATIC). Every sum of seconds adds the steps one
        at a time, as step after step would."""
        num_steps = len(steps)
        self.num_steps += num_steps
        self.num_scheduled_seqs += num_seqs * num_steps
        self.num_computed_tokens += num_tokens * num_steps
        self.num_padding_tokens += num_padding_tokens * num_steps
        self.num_decode_tokens += num_decode_tokens * num_steps
        self.num_prefill_tokens += (num_tokens - num_decode_tokens) * num_steps
        has_prompts = num_tokens > num_decode_tokens  # prompt tokens in the steps
        if has_prompts:
            self.num_decode_tokens_beside_prompts += num_decode_tokens * num_steps
        if num_waiting > self.peak_num_waiting:
            self.peak_num_waiting = num_waiting
        if limit is AdmissionLimit.TOKEN_BUDGET:
            cause = "prompt_budget" if has_prompts else "decode_budget"
        else:
            cause = limit.value if limit is not None else None
        busy_s, idle_s = self.busy_s, self.idle_slot_seconds
        reserved_s, wasted_s = self.reserved_slot_seconds, self.wasted_slot_seconds
        prompt_busy_s, decode_only_waiting_s = self.prompt_busy_s, self.decode_only_waiting_s
        waiting_request_s = self.waiting_request_seconds
        cause_s = self.waiting_s[cause] if cause else 0.0
        peak = self.peak_reserved_slots
        for step_s, reserved_slots, used_slots in steps:
            busy_s += step_s
            idle_s += num_idle_slots * step_s
            reserved_s += reserved_slots * step_s
            wasted_s += (reserved_slots - used_slots) * step_s
            if reserved_slots > peak:
                peak = reserved_slots
            if has_prompts:
                prompt_busy_s += step_s
            elif num_waiting:
                decode_only_waiting_s += step_s
            waiting_request_s += num_waiting * step_s
            cause_s += step_s
        self.busy_s, self.idle_slot_seconds = busy_s, idle_s
        self.reserved_slot_seconds, self.wasted_slot_seconds = reserved_s, wasted_s
        self.prompt_busy_s, self.decode_only_waiting_s = prompt_busy_s, decode_only_waiting_s
        self.waiting_request_seconds = waiting_request_s
        if cause:
            self.waiting_s[cause] = cause_s
        self.peak_reserved_slots = peak

    def summary(self) -> dict:
        """The counters, named as in the JSON README documents (%, ms, tokens, per step)."""
        result = {
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
            "mean_queue_ms": 1000 * (self.queue_s.value() / self.num_queued if self.num_queued
                                     else 0.0),
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
            "longest_prompt_len": self.longest_prompt_len,
            "num_sliced_prompts": self.num_sliced_prompts,
        }
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


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
