"""Async scheduling: the CPU schedules step n+1 while the GPU runs step n (vLLM 0.30.0's default).

With synchronous scheduling the engine does one thing at a time: schedule a step, run it, read
its output, schedule the next. The GPU waits while the CPU schedules. vLLM 0.30.0's engine keeps
a queue of two batches instead (`EngineCore.step_with_batch_queue`, vllm/v1/engine/core.py):

    schedule n+1 | the GPU runs n | read n's output | schedule n+2 | the GPU runs n+1 | ...

so step n+1 is scheduled *before* step n's output is known. Its scheduler (`AsyncScheduler`,
vllm/v1/core/sched/async_scheduler.py) decides as if the outputs in flight were there: a request
whose step n samples a token holds an output placeholder, and step n+1 feeds that token back
already (the GPU knows it; the CPU does not yet). What changes, step for step:

- every finish is seen one step later: the step that sampled a request's last token is read
  while the next one is already scheduled, so the request is reported finished, and its blocks
  freed, in that next step;
- a request whose last token is in flight is skipped, but stays running: nothing is left to
  compute for it. A batch may hold nobody at all (its step costs nothing);
- a request that arrives while a batch runs waits one more step: the next batch was scheduled
  already, when the previous one ended;
- preemption can hit a request whose token is in flight: the token still arrives (vLLM calls it
  stale) and counts; if it was the last one, the request finishes while it waits;
- with prefix caching, the block a token fills is hashed when the token arrives.

The clock (as the oracle servesim is checked against counts it): a batch runs when it is
scheduled or when the previous one ends, whichever is later; a batch with no tokens costs
nothing; scheduling itself costs no time here (the CPU's time per step, and how much of it the
GPU's step hides, is the clock's business). So in steady state step n is scheduled when batch
n - 2 ends, and the engine reads a batch's output when it ends.

With speculative decoding the placeholders cover the drafts too: a step that verifies k drafts
holds 1 + k placeholders, as if all were accepted, and the next step verifies k placeholder drafts
(the GPU proposes them; the CPU never sees them); the rejected ones are taken back when the output
is read, a step later. So a request's last step may run after all: its finish was not sure.

`AsyncScheduler` is vLLM's scheduler with placeholders; `BatchQueue` is the engine's queue of
two batches, in place of main.py's `SyncSteps` (the mode chooses, modes.py). `AsyncBulkScheduler`
(bulk_scheduler.py, speed only) is this scheduler with its running decodes scheduled and read as
a group, deciding exactly what these rules decide.
"""

from collections import deque
from typing import Optional

from batch import EngineCall, SchedulerOutput, StepResult
from request import Request, RequestStatus
from scheduler import Scheduler


class BatchQueue:
    """vLLM's batch queue of depth 2: each pass schedules a batch, then reads the output of the
    batch before it (waiting for it to end). Only the first pass after idle reads nothing."""

    def __init__(self, scheduler: "AsyncScheduler", clock):
        self.scheduler = scheduler
        self.clock = clock
        self.in_flight: Optional[tuple[SchedulerOutput, float]] = None  # (batch, its end)
        self.gpu_free_s = 0.0

    def step(self, now_s: float) -> EngineCall:
        scheduler = self.scheduler
        if self.in_flight is not None and not scheduler.has_unfinished_requests():
            scheduler.update_from_output(self.in_flight[0], now_s)  # it holds nobody
            self.in_flight = None
        batch = scheduler.schedule(now_s)
        reserved, used = scheduler.kv_cache.num_reserved_slots, scheduler.kv_cache.num_used_slots
        if batch.is_empty and self.in_flight is None:  # idle: nothing runs, nothing to read
            scheduler.update_from_output(batch, now_s)
            return EngineCall(batch, StepResult(), now_s, 0.0, now_s, reserved, used, ran=False)
        step_s = 0.0 if batch.is_empty else self.clock.step_time_s(batch)
        start_s = max(now_s, self.gpu_free_s)
        self.gpu_free_s = start_s + step_s
        previous, self.in_flight = self.in_flight, (batch, self.gpu_free_s)
        if previous is None:  # nothing to read yet: schedule the next batch at once
            return EngineCall(batch, StepResult(), start_s, step_s, now_s, reserved, used)
        previous_batch, previous_end_s = previous
        now_s = max(now_s, previous_end_s)
        result = scheduler.update_from_output(previous_batch, now_s)
        return EngineCall(batch, result, start_s, step_s, now_s, reserved, used)


class AsyncScheduler(Scheduler):
    """vLLM V1's scheduler, scheduling with the outputs in flight as placeholders.

    A request's computed tokens advance when it is scheduled (so that the next step, scheduled
    before this one's output, asks only for what is left); a step that will sample for it adds
    an output placeholder, which the output, when read, turns into its token.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sampling: deque[list[Request]] = deque()  # per batch in flight: who samples

    def schedule(self, now_s: float) -> SchedulerOutput:
        output = super().schedule(now_s)
        sampling = []
        for scheduled in output.scheduled:  # vLLM's _update_after_schedule
            request = scheduled.request
            request.num_computed_tokens += scheduled.num_new_tokens
            if not request.is_prefill_chunk:
                # its token and its drafts, should all be accepted; and k placeholder drafts
                # for its next step (the GPU proposes them; the CPU never sees them)
                request.num_output_placeholders += 1 + scheduled.num_draft_tokens
                request.num_draft_tokens = self.speculation.num_speculative_tokens
                sampling.append(scheduled)
        self._sampling.append(sampling)
        return output

    def _num_new_tokens(self, request: Request, token_budget: int) -> int:
        """As in the synchronous scheduler, except that a request whose last token is in flight
        gets nothing (it stays running until that token arrives): its computed tokens, plus the
        token its latest step samples, minus the placeholders still to come, reach its final
        length (vLLM's check at the top of the running loop, Scheduler.schedule)."""
        if (request.num_output_placeholders
                and request.num_computed_tokens + 2 - request.num_output_placeholders
                >= request.prompt_len + request.max_tokens):
            return 0
        return super()._num_new_tokens(request, token_budget)

    def update_from_output(self, output: SchedulerOutput, now_s: float) -> StepResult:
        """The output of `output`, the oldest batch in flight (the queue reads them in order):
        a token for each request that sampled, also for one preempted since (a stale token: it
        counts, and may finish it while it waits)."""
        result = StepResult()
        for scheduled in self._sampling.popleft():
            self._read_output(scheduled, result, now_s)
        return result

    def _read_output(self, scheduled, result: StepResult, now_s: float) -> None:
        """The token (and accepted drafts) one request of the batch sampled."""
        request = scheduled.request
        if request.is_finished:  # its last token came in the batch before: nothing to add
            return
        running = request.status is RequestStatus.RUNNING
        num_tokens = 1 + self._accepted(scheduled, result, rolls_back=running)
        num_tokens = min(num_tokens, request.max_tokens - request.num_output_tokens)
        finished = result.sample(request, now_s, self.max_model_len, num_tokens)
        if not running:  # preempted meanwhile: a stale token, which may finish it waiting
            if finished:
                self.waiting.remove(request)
            return
        request.num_output_placeholders -= num_tokens
        self.kv_cache.cache_known_tokens(
            request, request.num_computed_tokens - request.num_output_placeholders)
        if finished:
            self._free_finished(request)

    def _accepted(self, scheduled, result: StepResult, rolls_back: bool) -> int:
        """How many of the drafts the step verified the target accepted; the rejected ones are
        taken back from the computed tokens and the placeholders (not for a stale output: the
        preemption reset both already)."""
        num_drafts = scheduled.num_draft_tokens
        if not num_drafts:
            return 0
        request = scheduled.request
        num_accepted = 0 if scheduled.padded else self.speculation.num_accepted(num_drafts)
        result.verified.append((request, num_drafts, num_accepted))
        if rolls_back:
            num_rejected = num_drafts - num_accepted
            request.num_computed_tokens -= num_rejected
            request.num_output_placeholders -= num_rejected
            self.kv_cache.drop_rejected_drafts(num_rejected)
        return num_accepted
