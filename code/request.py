"""A sequence's life: its lengths, how far the engine has computed it, and when it got tokens.

vLLM V1 has no prefill phase and no decode phase. A request only knows two counters:

    num_tokens          = prompt_len + num_output_tokens     (what the sequence is so far)
    num_computed_tokens = how many of those the KV cache holds

Each step the scheduler grants it some new tokens to compute: a prompt chunk, a whole prompt, or
the single token it sampled last step (a "decode"). Whenever computed catches up with num_tokens,
the model samples one more output token and num_tokens grows by one. With speculative decoding
(spec_decode.py) a decode also carries the drafts proposed for it, which the step verifies.

Status moves along one path, each transition a method that checks where it comes from:

    WAITING --admit--> RUNNING --finish--> FINISHED
       ^                  |
       +---- preempt -----+   (PREEMPTED: KV freed, recomputed from scratch on resume)
    WAITING --reject--> REJECTED   (can never fit; counted, never retried)

Times are on the virtual clock, in seconds since the workload began (`arrival_s`, ...).
"""

import enum
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, Optional


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class TokenRun:
    """Consecutive known tokens of a sequence, from position `start`: either the token ids
    themselves, or a name for them (`source`): then the run's j-th token is token j of that
    source, from its very first (a Mooncake hash id names 512 prompt tokens; a synthetic shared
    prefix, its length). Sources are tuples of integers, so that their hashes are the same in
    every run."""
    start: int
    length: int
    token_ids: Optional[tuple[int, ...]] = None
    source: Optional[tuple[int, ...]] = None

    def part(self, begin: int, end: int) -> tuple:
        """The tokens at positions [begin, end) of the sequence (inside this run), as a key."""
        if self.token_ids is not None:
            return (0, *self.token_ids[begin - self.start:end - self.start])
        return (*self.source, begin - self.start, end - self.start)

    def block_keys(self, begin: int, num_blocks: int, block_size: int) -> list[tuple]:
        """Keys of the `num_blocks` whole blocks of token ids from position `begin`, all inside
        this run: `(self.part(b, b + block_size),)` for each block's begin b, made in one go."""
        ids, first = self.token_ids, begin - self.start
        return [((0, *ids[b:b + block_size]),)
                for b in range(first, first + num_blocks * block_size, block_size)]


class NamedBlocks(NamedTuple):  # (a tuple: one is made for each hash id a prompt names)
    """Blocks `first` .. `stop` - 1 of a sequence, all wholly inside one run of named tokens
    (of a Mooncake hash id, 32 blocks of 16; of a shared prefix, all of it). Their tokens
    follow from the run's: so they need no key each, and prefix caching hashes them as one
    (kv_cache.py), from the run's first whole block `run_block`, `run_offset` tokens into the
    source."""
    source: tuple[int, ...]
    run_block: int
    run_offset: int
    first: int
    stop: int


@dataclass(frozen=True)
class TokenContent:
    """What a sequence's tokens are, as far as prefix caching needs to know: enough to tell
    whether two KV blocks hold the same tokens. Runs cover positions 0 .. known_length - 1 in
    order; beyond them (outputs nobody knows in advance) a block's tokens are its own."""
    runs: tuple[TokenRun, ...]
    shared_length: Optional[int] = None  # tokens before the first that no other request of the
    #   run has (a trace's hash id no other row names; None: none such is known). A block past
    #   it can be found by nobody else: kv_cache.py caches it only when its own request could
    #   look for it again, as blocks of a request's own tokens are.

    @cached_property
    def known_length(self) -> int:
        last = self.runs[-1] if self.runs else None
        return last.start + last.length if last else 0

    @property
    def num_shared_tokens(self) -> int:
        """Known tokens another request of the run may have too, from the first on."""
        if self.shared_length is None:
            return self.known_length
        return min(self.shared_length, self.known_length)

    def block_keys(self, first_block: int, stop_block: int, block_size: int) -> list:
        """Keys for the tokens of blocks first_block .. stop_block - 1, as far as all of a
        block's tokens are known: equal keys mean equal tokens. One key per block, except that
        the blocks wholly inside a run of named tokens come as one `NamedBlocks` for them all."""
        keys = []
        stop_block = min(stop_block, self.known_length // block_size)
        block, index = first_block, 0
        while block < stop_block:
            begin = block * block_size
            while self.runs[index].start + self.runs[index].length <= begin:
                index += 1
            run = self.runs[index]
            num_inside = min(stop_block, (run.start + run.length) // block_size) - block
            if num_inside > 0 and run.source is not None:  # wholly inside: named together
                run_block = -(-run.start // block_size)
                keys.append(NamedBlocks(run.source, run_block,
                                        run_block * block_size - run.start, block,
                                        block + num_inside))
                block += num_inside
            elif num_inside > 0:  # blocks wholly inside this run of token ids: one part each
                keys += run.block_keys(begin, num_inside, block_size)
                block += num_inside
            else:
                keys.append(self._key_across_runs(begin, begin + block_size, index))
                block += 1
        return keys

    def _key_across_runs(self, begin: int, end: int, index: int) -> tuple:
        """A block whose tokens start in run `index` and end in a later one: a part per run, but
        token ids that run on across runs make one part, however they were cut."""
        parts = []
        while begin < end:
            run = self.runs[index]
            stop = min(end, run.start + run.length)
            part = run.part(begin, stop)
            if part[0] == 0 and parts and parts[-1][0] == 0:
                part = parts.pop() + part[1:]
            parts.append(part)
            begin, index = stop, index + 1
        return tuple(parts)

    @staticmethod
    def of(prompt: list, output_token_ids: Optional[tuple[int, ...]] = None,
           shared_length: Optional[int] = None) -> "TokenContent":
        """`prompt`: TokenRun-making pieces in order: a tuple of token ids, or (source, length)
        for `length` named tokens of `source` from its start."""
        runs, start = [], 0
        for piece in prompt:
            if isinstance(piece[0], tuple):  # (source, length)
                source, length = piece
                runs.append(TokenRun(start, length, source=source))
            else:
                length = len(piece)
                runs.append(TokenRun(start, length, token_ids=tuple(piece)))
            start += length
        if output_token_ids:
            runs.append(TokenRun(start, len(output_token_ids), token_ids=tuple(output_token_ids)))
        return TokenContent(tuple(run for run in runs if run.length), shared_length)


@dataclass(eq=False, slots=True)  # eq=False: two requests are never "equal", only the same
class Request:
    request_id: str
    arrival_s: float
    prompt_len: int
    max_tokens: int  # output tokens the client asked for (as with ignore_eos, it gets them all)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_draft_tokens: int = 0  # drafts proposed for its next step (speculative decoding only)
    is_prefill_chunk: bool = False  # its latest step computed part of its sequence and sampled
    #                                 nothing (vLLM's flag, read by the one-token padding)
    num_output_placeholders: int = 0  # async scheduling: tokens sampled by steps still in
    #                                   flight, not known yet (async_scheduling.py)
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0  # tokens whose KV a preemption threw away: computed again
    num_lost_tokens: int = 0  # of them, those its latest preemption threw away
    first_scheduled_s: Optional[float] = None  # when a step first computed its tokens
    first_token_s: Optional[float] = None
    last_token_s: Optional[float] = None
    reject_reason: Optional[str] = None
    arrival_index: Optional[int] = None  # its place in arrival order, given by the recorder
    content: Optional[TokenContent] = None  # what its tokens are (prefix caching); None: its
    #                                         own, shared with nobody
    block_hashes: list = field(default_factory=list)  # its full blocks' content hashes, as
    #                                                   far as computed (kv_cache.py)
    own_content_id: Optional[int] = None  # names the tokens only it has, in those hashes

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def num_tokens_to_compute(self) -> int:
        """Tokens the cache is missing: the rest of the prompt, or 1 for a decode (plus its
        drafts, and the tokens steps in flight are sampling: vLLM's num_tokens_with_spec +
        num_output_placeholders - num_computed_tokens)."""
        return (self.num_tokens + self.num_draft_tokens + self.num_output_placeholders
                - self.num_computed_tokens)

    @property
    def is_finished(self) -> bool:
        return self.status in (RequestStatus.FINISHED, RequestStatus.REJECTED)

    @property
    def has_known_outputs(self) -> bool:
        """Its output tokens are known in advance (a recorded answer): blocks they fill can be
        shared like prompt blocks."""
        return self.content is not None and self.content.known_length > self.prompt_len

    def admit(self) -> None:
        assert self.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), self.status
        self.status = RequestStatus.RUNNING

    def preempt(self) -> None:
        """Recompute-style preemption: the KV is gone, outputs so far are kept."""
        assert self.status is RequestStatus.RUNNING, self.status
        self.status = RequestStatus.PREEMPTED
        self.num_recomputed_tokens += self.num_computed_tokens  # work done twice
        self.num_lost_tokens = self.num_computed_tokens
        self.num_computed_tokens = 0
        self.num_draft_tokens = 0  # drafted from KV that is gone
        self.num_output_placeholders = 0  # a token still in flight arrives all the same (stale)
        self.num_preemptions += 1

    def found_cached(self, num_cached_tokens: int) -> None:
        """Admitted with its first tokens found in the prefix cache: they count as computed, and
        those a preemption threw away but the cache kept are not computed twice after all."""
        self.num_computed_tokens = num_cached_tokens
        self.num_recomputed_tokens -= min(num_cached_tokens, self.num_lost_tokens)
        self.num_lost_tokens = 0

    def finish(self) -> None:
        """Its last token came. Async scheduling: it may come to a request preempted while the
        step sampling it was in flight: it then finishes while waiting."""
        assert self.status in (RequestStatus.RUNNING, RequestStatus.PREEMPTED), self.status
        self.status = RequestStatus.FINISHED

    def reject(self, reason: str) -> None:
        assert self.status is RequestStatus.WAITING, self.status
        self.status = RequestStatus.REJECTED
        self.reject_reason = reason

    def is_done(self, max_model_len: int) -> bool:
        """Its output length is reached, or the sequence hit max_model_len (output capped)."""
        return self.num_output_tokens >= self.max_tokens or self.num_tokens >= max_model_len

    def append_output_token(self, now_s: float, num_tokens: int = 1) -> Optional[float]:
        """The step ending at `now_s` sampled a token for this request (or `num_tokens` at once:
        accepted drafts and the target's own token, streamed together).

        Returns the inter-token latency it ends (seconds since the previous token), or None for
        the first token, which ends the time to first token instead.
        """
        previous_s = self.last_token_s
        if previous_s is None:
            self.first_token_s = now_s
        self.last_token_s = now_s
        self.num_output_tokens += num_tokens
        return None if previous_s is None else now_s - previous_s


def reject_if_it_can_never_run(request: Request, max_model_len: int) -> bool:
    """On arrival: a prompt of max_model_len tokens or more leaves no room for even one output
    token, so no scheduler could ever finish it. Reject it (counted, with the reason) instead of
    letting it wait forever. Returns whether it was rejected."""
    if request.prompt_len < max_model_len:
        return False
    request.reject(f"prompt of {request.prompt_len} tokens leaves no room for output under "
                   f"max_model_len {max_model_len}")
    return True
