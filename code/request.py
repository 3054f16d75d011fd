"""A sequence's life: its lengths, how far the engine has computed it, and when it got tokens.

vLLM V1 has no prefill phase and no decode phase. A request only knows two counters:

    num_tokens          = prompt_len + num_output_tokens     (what the sequence is so far)
    num_computed_tokens = how many of those the KV cache holds

Each step the scheduler grants it some new tokens to compute: a prompt chunk, a whole prompt, or
the single token it sampled last step (a "decode"). Whenever computed catches up with num_tokens,
the model samples one more output token and num_tokens grows by one.

Status moves along one path, each transition a method that checks where it comes from:

    WAITING --admit--> RUNNING --finish--> FINISHED
       ^                  |
       +---- preempt -----+   (PREEMPTED: KV freed, recomputed from scratch on resume)
    WAITING --reject--> REJECTED   (can never fit; counted, never retried)

Times are on the virtual clock, in seconds since the workload began (`arrival_s`, ...).
"""

import enum
from dataclasses import dataclass
from typing import Optional


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass(eq=False, slots=True)  # eq=False: two requests are never "equal", only the same
class Request:
    request_id: str
    arrival_s: float
    prompt_len: int
    max_tokens: int  # output tokens the client asked for (as with ignore_eos, it gets them all)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0  # tokens whose KV a preemption threw away: computed again
    first_token_s: Optional[float] = None
    last_token_s: Optional[float] = None
    reject_reason: Optional[str] = None
    arrival_index: Optional[int] = None  # its place in arrival order, given by the recorder

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def num_tokens_to_compute(self) -> int:
        """Tokens the cache is missing: the rest of the prompt, or 1 for a decode."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status in (RequestStatus.FINISHED, RequestStatus.REJECTED)

    def admit(self) -> None:
        assert self.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), self.status
        self.status = RequestStatus.RUNNING

    def preempt(self) -> None:
        """Recompute-style preemption: the KV is gone, outputs so far are kept."""
        assert self.status is RequestStatus.RUNNING, self.status
        self.status = RequestStatus.PREEMPTED
        self.num_recomputed_tokens += self.num_computed_tokens  # work done twice
        self.num_computed_tokens = 0
        self.num_preemptions += 1

    def finish(self) -> None:
        assert self.status is RequestStatus.RUNNING, self.status
        self.status = RequestStatus.FINISHED

    def reject(self, reason: str) -> None:
        assert self.status is RequestStatus.WAITING, self.status
        self.status = RequestStatus.REJECTED
        self.reject_reason = reason

    def is_done(self, max_model_len: int) -> bool:
        """Its output length is reached, or the sequence hit max_model_len (output capped)."""
        return self.num_output_tokens >= self.max_tokens or self.num_tokens >= max_model_len

    def append_output_token(self, now_s: float) -> Optional[float]:
        """The step ending at `now_s` sampled a token for this request.

        Returns the inter-token latency it ends (seconds since the previous token), or None for
        the first token, which ends the time to first token instead.
        """
        previous_s = self.last_token_s
        if previous_s is None:
            self.first_token_s = now_s
        self.last_token_s = now_s
        self.num_output_tokens += 1
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
