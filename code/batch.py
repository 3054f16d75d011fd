"""The batch: what one engine step computes, as a scheduler decided it, and what came of it.

Decision is kept apart from execution. A scheduler returns a `SchedulerOutput` (who runs, how many
new tokens each, who was preempted); the forward model prices it on the virtual clock; the
scheduler's `update_from_output` then applies it and returns a `StepResult`. One step of three
running requests might be:

    request   new tokens   context (already cached)   what it is
    "3"            1             1,201                 a decode
    "5"            1               388                 a decode
    "9"          510             2,048                 a prefill chunk of a long prompt

`BatchScheduler` is the contract both schedulers keep (vLLM V1's in scheduler.py, the static one
in static_batching.py); it is all the engine loop in main.py knows about a scheduler.
"""

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator, Optional, Protocol

from request import Request


@dataclass(slots=True)
class ScheduledRequest:
    request: Request
    num_new_tokens: int       # tokens computed for this request in this step (drafts included)
    num_context_tokens: int   # tokens already in its KV cache, which the new ones attend to
    num_draft_tokens: int = 0  # of the new tokens, drafts to verify (speculative decoding)
    padded: bool = False       # its drafts are placeholders padding a one-token admission to
    #                            1 + k tokens (vLLM 0.30.0): the sampler rejects them all

    @property
    def is_decode(self) -> bool:
        """One new token after the whole prompt: the token sampled last step being fed back
        (with the drafts proposed after it, if any)."""
        return (self.num_new_tokens - self.num_draft_tokens == 1
                and self.num_context_tokens >= self.request.prompt_len)


@dataclass(slots=True)
class PrefixLookup:
    """A request admitted with prefix caching on: what it looked up and found (vLLM's stats)."""
    request_id: str
    num_tokens: int         # its sequence when admitted: the tokens looked up
    num_cached_tokens: int  # found in the cache, so not computed again
    resumed: bool           # back from a preemption: vLLM counts these apart from new requests


class AdmissionLimit(Enum):
    """Why vLLM V1's scheduler stopped admitting WAITING requests in a step, while some waited.
    vLLM keeps no such counter; `diagnose` reads it to tell the three defaults apart: the block
    pool (PagedAttention), the batch's caps (continuous batching), the token budget (chunked
    prefill)."""
    KV_BLOCKS = "kv_blocks"        # the free blocks cannot hold the head's sequence (or its
    #                                proposer's lookahead slots), or a preemption this step
    #                                skipped admission: the pool ran out
    MAX_NUM_SEQS = "max_num_seqs"  # max_num_seqs requests already run
    TOKEN_BUDGET = "token_budget"  # the step's token budget is spent, or, with chunked prefill
    #                                off, too small for the head's whole prompt


@dataclass(slots=True)
class SchedulerOutput:
    """One step's batch, and the sums the virtual clock prices it by.

    Requests are named one by one in `scheduled`, except, on the engine's fast path, the running
    decodes, which are counted in bulk (`num_bulk_decodes`): each computes exactly one token, so
    the sums need only their number and their summed context (see running_decodes.py).
    """
    scheduled: list[ScheduledRequest] = field(default_factory=list)  # running first, then new
    preempted: list[Request] = field(default_factory=list)
    num_bulk_decodes: int = 0      # running decodes not named in `scheduled` (they come first)
    num_scheduled_tokens: int = 0  # new tokens, summed over the batch
    num_context_tokens: int = 0    # cached tokens they attend to, summed
    num_attention_pairs: int = 0   # (query, key) pairs of causal attention, summed
    num_decode_tokens: int = 0     # new tokens of decodes, drafts included (the rest: prompts)
    num_padding_tokens: int = 0    # STATIC only: tokens computed just to pad the batch ...
    num_prompt_padding_tokens: int = 0  # ... of them, those padding prompts to the longest
    #                                     (the rest are finished members' decode slots)
    num_idle_slots: int = 0        # STATIC only: seats of the batch left empty while requests
    #                                waited (none may join until the batch drains)
    prefix_lookups: list[PrefixLookup] = field(default_factory=list)  # admitted, caching on
    admission_limit: Optional[AdmissionLimit] = None  # what kept WAITING's head out; None when
    #                                nobody was left waiting (and in NAIVE and STATIC)

    @property
    def is_empty(self) -> bool:
        return not (self.scheduled or self.num_bulk_decodes)

    @property
    def num_seqs(self) -> int:
        return len(self.scheduled) + self.num_bulk_decodes

    def add(self, request: Request, num_new_tokens: int, num_context_tokens: int,
            num_draft_tokens: int = 0, padded: bool = False) -> None:
        scheduled = ScheduledRequest(request, num_new_tokens, num_context_tokens, num_draft_tokens,
                                     padded)
        self.scheduled.append(scheduled)
        self.num_scheduled_tokens += num_new_tokens
        self.num_context_tokens += num_context_tokens
        self.num_attention_pairs += attention_pairs(num_new_tokens, num_context_tokens)
        if scheduled.is_decode:
            self.num_decode_tokens += num_new_tokens

    def add_decodes(self, num_decodes: int, num_context_tokens: int) -> None:
        """`num_decodes` decodes of one token each, attending to `num_context_tokens` in all:
        the sums `add` would reach adding them one by one."""
        self.num_bulk_decodes += num_decodes
        self.num_scheduled_tokens += num_decodes
        self.num_context_tokens += num_context_tokens
        self.num_attention_pairs += num_context_tokens + num_decodes
        self.num_decode_tokens += num_decodes


def attention_pairs(num_new_tokens: int, num_context_tokens: int) -> int:
    """(query, key) pairs of one request's new tokens. Causal: new token i attends to the whole
    context and to the i new tokens up to it."""
    return num_new_tokens * num_context_tokens + num_new_tokens * (num_new_tokens + 1) // 2


@dataclass(slots=True)
class StepResult:
    """What a step produced, as `update_from_output` applied it."""
    sampled: list[Request] = field(default_factory=list)       # got an output token, batch order
    first_tokens: list[Request] = field(default_factory=list)  # ... and it was their first
    num_bulk_sampled: int = 0   # decodes that sampled without being named (SchedulerOutput's bulk)
    itls: list[tuple[float, int]] = field(default_factory=list)  # (gap before a token, s; how many
    #                                                               tokens followed that gap)
    finished: list[Request] = field(default_factory=list)
    # Speculative decoding: (request, drafts verified, drafts accepted) per request verified
    verified: list[tuple[Request, int, int]] = field(default_factory=list)
    num_extra_tokens: int = 0   # tokens beyond one per sampled request (accepted drafts)

    @property
    def num_sampled(self) -> int:
        """Requests that got output in the step."""
        return len(self.sampled) + self.num_bulk_sampled

    @property
    def num_output_tokens(self) -> int:
        return self.num_sampled + self.num_extra_tokens

    def sample(self, request: Request, now_s: float, max_model_len: int,
               num_tokens: int = 1) -> bool:
        """The step ending at `now_s` sampled one output token for `request` (or `num_tokens`,
        accepted drafts with it: they reach the client together, after one gap, as `vllm bench
        serve` counts a streamed chunk).

        Returns whether that token was its last (it is then FINISHED; the scheduler frees its KV).
        """
        itl_s = request.append_output_token(now_s, num_tokens)
        self.sampled.append(request)
        self.num_extra_tokens += num_tokens - 1
        if itl_s is None:
            self.first_tokens.append(request)  # its time to first token ends here
        else:
            self.itls.append((itl_s, 1))
        return self.finish_if_done(request, max_model_len)

    def finish_if_done(self, request: Request, max_model_len: int) -> bool:
        if not request.is_done(max_model_len):
            return False
        request.finish()
        self.finished.append(request)
        return True


@dataclass(slots=True)
class DecodeRun:
    """The same batch, step after step, until something changes: decodes, and perhaps one
    prompt whose chunk spends the rest of the token budget in every step.

    A bulk scheduler (bulk_scheduler.py, speed only) offers one (`identical_decode_steps`) when
    it is sure that its coming steps each give the same running requests one token (and the
    prompt the same chunk), admitting, finishing and preempting nobody; only the context grows,
    by `num_seqs` a step (and the prompt's by its chunk). Those steps are then priced and
    recorded without asking the scheduler again, and it is handed their end times
    (`apply_decode_run`; under async scheduling, the times their outputs were read).
    """
    new_slots_reserved: Iterator[int]  # per coming step: KV slots it reserves (new blocks x
    #                                    block_size); the iterator ends where the run must
    num_seqs: int              # sequences each step computes (STATIC: padding members too)
    num_sampled: int           # of them, those that sample a token (and cache one more)
    num_context_tokens: int    # what the first step attends to; each step adds num_seqs
    num_padding_tokens: int    # per step
    last_token_s: float        # when the sampling requests got their latest token
    num_idle_slots: int = 0    # per step: STATIC's empty seats while requests wait (the run
    #                            stops at the next arrival, so the queue does not change in it)
    admission_limit: Optional[AdmissionLimit] = None  # per step: what keeps WAITING's head out
    prompt: Optional[Request] = None  # a running prompt behind the decodes, chunked each step
    num_prompt_tokens: int = 0        # its chunk, each step (the budget the decodes leave)
    prompt_context_tokens: int = 0    # what its first chunk attends to; each adds its own
    arrivals_wait: bool = False  # an arrival in the run changes nothing but WAITING's length:
    #                              it finds the budget spent, or waits behind a head kept out


class BatchScheduler(Protocol):
    """What the engine loop asks of a scheduler, whichever mode it serves."""
    kv_cache: object            # PagedKVCache or ContiguousKVCache (kv_cache.py)
    running: list[Request]
    waiting: deque[Request]

    @property
    def num_free_blocks(self) -> Optional[int]:
        """Free KV blocks; None for contiguous reservations, which have no blocks."""

    def add_request(self, request: Request) -> None:
        """Queue an arrival, or reject it on the spot if it can never run."""

    def has_unfinished_requests(self) -> bool: ...

    def next_wakeup_s(self) -> Optional[float]:
        """When an idle engine must look again without an arrival (STATIC's window), or None."""

    def schedule(self, now_s: float) -> SchedulerOutput: ...

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult: ...


@dataclass(slots=True)
class EngineCall:
    """One pass of the engine loop (main.simulate): the batch it scheduled, and the output it
    read: the same batch's with synchronous scheduling, the previous one's with async
    scheduling (async_scheduling.py)."""
    batch: SchedulerOutput
    result: StepResult       # the output read in this pass
    start_s: float           # when the batch began on the GPU
    step_s: float            # the batch's GPU time
    now_s: float             # the clock when the pass is over
    kv_reserved_slots: int   # while the batch ran
    kv_used_slots: int
    ran: bool = True         # False: nothing scheduled and nothing in flight (idle)


@dataclass
class EngineStep:
    """One step as the engine loop saw it, for observers (step log, timeline, charts)."""
    index: int
    start_s: float             # virtual clock when the step began
    step_s: float              # its duration
    batch: SchedulerOutput
    result: StepResult
    num_running: int           # after the step
    num_waiting: int           # after the step
    num_free_blocks: Optional[int]  # after the step; None for contiguous KV (no blocks)
    kv_reserved_slots: int     # while the step ran
    kv_used_slots: int         # while the step ran
    block_tables: Optional[dict[str, list[int]]] = None  # after the step: request id -> its
    #                            physical block ids (PagedAttention), a live view of the KV
    #                            cache's own tables, not a copy; None for contiguous KV, and in
    #                            the steps decode_runs.repeat_identical_decode_steps prices
    #                            (their blocks are taken when the run is applied), which only
    #                            observers of sums see
    replica: Optional[int] = None  # with several engines (cluster.py): which one ran the step
    routed: Optional[dict[str, str]] = None  # ... and the requests routed to it since its last
    #                            step: request id -> why the router chose it (router.py)
