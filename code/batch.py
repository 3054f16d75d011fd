"""The batch: what one engine step computes, as a scheduler decided it, and what came of it.

Decision is kept apart from execution. A scheduler returns a `SchedulerOutput` (who runs, how many
new tokens each, who was preempted); the forward model prices it on the virtual clock; the
scheduler's `update_from_output` then applies it and returns a `StepResult`. One step of three
running requests might be:

    request   new tokens   context (already cached)   what it is
    "3"            1             1,201                 a decode
    "5"            1               388                 a decode
    "9"          510             2,048                 a prefill chunk of a long prompt
"""

from dataclasses import dataclass, field
from typing import Optional

from request import Request


@dataclass(slots=True)
class ScheduledRequest:
    request: Request
    num_new_tokens: int       # tokens computed for this request in this step
    num_context_tokens: int   # tokens already in its KV cache, which the new ones attend to

    @property
    def is_decode(self) -> bool:
        """One new token after the whole prompt: the token sampled last step being fed back."""
        return self.num_new_tokens == 1 and self.num_context_tokens >= self.request.prompt_len


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)  # running first, then new
    preempted: list[Request] = field(default_factory=list)
    num_scheduled_tokens: int = 0  # summed over `scheduled`
    num_padding_tokens: int = 0    # STATIC only: tokens computed just to pad the batch

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    def add(self, request: Request, num_new_tokens: int, num_context_tokens: int) -> None:
        self.scheduled.append(ScheduledRequest(request, num_new_tokens, num_context_tokens))
        self.num_scheduled_tokens += num_new_tokens


@dataclass(slots=True)
class StepResult:
    """What a step produced, as `update_from_output` applied it."""
    finished: list[Request] = field(default_factory=list)
    itls_s: list[float] = field(default_factory=list)  # gap before each non-first token sampled
    num_first_tokens: int = 0                          # requests that got their first token


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
