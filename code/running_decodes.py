"""The running decodes, kept in bulk: why a step costs what changes, not how many requests run.

In a busy engine most running requests are decodes. Every step each of them computes the token it
sampled last, samples the next, and holds one more token of KV. Visiting every one of them every
step would make a step's cost grow with the batch, yet in a step of 80 decodes only a handful of
things happen: about 5 of them fill their last 16-token block and need a new one, and now and then
one finishes. `RunningDecodes` keeps the decodes as a group and touches only those:

    all members advance together    one counter, `step`, moves; a member's own counters (computed
                                    tokens, outputs, last token time) catch up only when someone
                                    looks at it (`sync`)
    block boundaries                a member fills a block every block_size steps, at steps known
                                    when it joins: members sit in block_size buckets by that step
                                    modulo block_size, and a step looks into one bucket
    finishes                        known when a member joins (its outputs left): members sit in
                                    a dict from the group step of their last token
    the clock's sums                the members' summed context grows by their number every step

The scheduler's rules (scheduler.py) are untouched by this: a member is a running request that is
exactly one token behind and decoded in the step before, so the rules would give it exactly one
token this step too. A step that needs the rules one request at a time (a preemption, a decode
squeezed out of the budget) hands every member back first (`release_all`).

Under async scheduling (async_scheduling.py) a member also has one token in flight between two
passes of the batch queue: the group steps when the batch in flight is read, and a member leaves
one step before its last token would be sampled, when that token is the one in flight
(`tokens_in_flight`).
"""

from typing import Optional

from request import Request


class RunningDecodes:
    """Requests that decode together, one token each per step, until each reaches its end.

    `block_size` None: no blocks to watch (STATIC's batch, whose KV is reserved contiguously).
    """

    def __init__(self, max_model_len: int, block_size: Optional[int] = None,
                 tokens_in_flight: int = 0):
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.tokens_in_flight = tokens_in_flight  # async scheduling: 1, each member's latest
        #   token still in flight; a member leaves at the step its last one is, not sampled
        self.step = 0              # group steps so far: every member advanced one token in each
        self.last_sample_s = 0.0   # when the last one ended: every member's last token time
        self._synced_at: dict[Request, int] = {}  # member -> group step its counters are synced to
        self._sum_lag = 0          # sum over members of (computed tokens - step synced at)
        self._crossing: list[dict[str, Request]] = [{} for _ in range(block_size or 0)]  # by id
        self._finishing: dict[int, list[Request]] = {}  # group step -> members whose last token
        #                                                  it samples
        self.num_with_known_outputs = 0  # members whose outputs are known in advance (a
        #                                  recorded answer): their full blocks can be shared

    def __len__(self) -> int:
        return len(self._synced_at)

    def __contains__(self, request: Request) -> bool:
        return request in self._synced_at

    @property
    def num_context_tokens(self) -> int:
        """The members' cached tokens, summed: what their decodes attend to in the next step."""
        return self._sum_lag + len(self._synced_at) * self.step

    def crossing_now(self) -> dict[str, Request]:
        """Members whose next token starts a new block: each needs one more block this step
        (by request id, in joining order)."""
        return self.crossing_at(self.step)

    def crossing_at(self, step: int) -> dict[str, Request]:
        """The members that take a block in the step that starts at group step `step`."""
        return self._crossing[step % self.block_size]

    def finishes_at(self, step: int) -> bool:
        """Does the group step that brings the count to `step` sample some member's last token?"""
        return step in self._finishing

    def steps_before_a_finish(self) -> int:
        """How many steps the group can take before the one that finishes somebody."""
        return min(self._finishing) - self.step - 1 if self._finishing else 0

    def join(self, request: Request) -> None:
        """`request` just sampled a token, is one token behind and is not finished."""
        self.last_sample_s = request.last_token_s  # the same for every member
        lag = request.num_computed_tokens - self.step
        self._synced_at[request] = self.step
        self._sum_lag += lag
        if self.block_size:
            # Its computed tokens reach a multiple of block_size (a full last block) at the
            # steps s with lag + s = 0 (mod block_size).
            self._crossing[-lag % self.block_size][request.request_id] = request
        self._finishing.setdefault(self._last_step(request), []).append(request)
        if request.has_known_outputs:
            self.num_with_known_outputs += 1

    def _last_step(self, request: Request) -> int:
        """The group step that samples a (synced) member's last token (with a token in flight,
        the step after which its last token is in flight)."""
        return self.step + min(request.max_tokens - request.num_output_tokens,
                               self.max_model_len - request.num_tokens) - self.tokens_in_flight

    def members(self) -> list[Request]:
        return list(self._synced_at)

    def num_computed_tokens(self, request: Request) -> int:
        """A member's computed tokens now, without syncing it."""
        return request.num_computed_tokens + self.step - self._synced_at[request]

    def sync(self, request: Request) -> None:
        """Bring a member's own counters up to the group's step."""
        behind = self.step - self._synced_at[request]
        if behind:
            request.num_computed_tokens += behind
            request.num_output_tokens += behind
            request.last_token_s = self.last_sample_s
            self._synced_at[request] = self.step

    def sync_all(self) -> None:
        """Bring every member's counters up to date (for a reader outside the scheduler)."""
        for request in self._synced_at:
            self.sync(request)

    def advance(self, now_s: float) -> tuple[float, int, list[Request]]:
        """Every member computed its token and sampled the next in the step that ended at `now_s`.

        Returns the gap each of them waited for its token (s), how many they were, and those whose
        token was their last: they leave the group, synced.
        """
        itl_s = now_s - self.last_sample_s
        num_sampled = len(self._synced_at)
        self.step += 1
        self.last_sample_s = now_s
        last_tokens = self._finishing.pop(self.step, [])
        for request in last_tokens:
            self.sync(request)
            self._drop(request)
        return itl_s, num_sampled, last_tokens

    def advance_without_finishes(self, num_steps: int, now_s: float) -> None:
        """`advance` for `num_steps` steps in a row, the last ending at `now_s`, that sample
        nobody's last token (a run of identical steps, bulk_scheduler.py)."""
        self.step += num_steps
        self.last_sample_s = now_s

    def remove(self, request: Request) -> None:
        """A member leaves before its last token (it is preempted), synced."""
        self.sync(request)
        finishing = self._finishing[self._last_step(request)]
        finishing.remove(request)
        if not finishing:
            del self._finishing[self._last_step(request)]
        self._drop(request)

    def _drop(self, request: Request) -> None:
        lag = request.num_computed_tokens - self.step
        del self._synced_at[request]
        self._sum_lag -= lag
        if request.has_known_outputs:
            self.num_with_known_outputs -= 1
        if self.block_size:
            del self._crossing[-lag % self.block_size][request.request_id]

    def release_all(self) -> None:
        """Hand every member back as an ordinary request, synced, and empty the group."""
        self.sync_all()
        self._synced_at.clear()
        self._sum_lag = 0
        self.num_with_known_outputs = 0
        for bucket in self._crossing:
            bucket.clear()
        self._finishing.clear()
