"""The engine's invariants, checked after every step of a run: off by default, on in the tests.

    SERVESIM_CHECK_INVARIANTS=1 python3 code/main.py ...        checks every run of the command
    (every-request: the plain rules too, the bulk path off; 0 or unset: off; anything else is
    refused in one line)

What must hold after every step, whatever the mode, the workload or the flags:

    KV blocks      conserved: free + held = the pool, every block in one place only (a block
                   shared by prefix caching is held once, by several tables), and a running
                   request holds exactly the blocks its computed tokens fill (with speculative
                   decoding, up to 2k more: rejected drafts' and the lookahead slots); a cached
                   block holds the tokens its hash names (paged); reservations as many as the
                   batch has members (contiguous); used slots = computed tokens, a shared block's
                   counted once
    the batch      within the token budget and max_num_seqs; RUNNING within max_num_seqs
    a request      computed tokens never above its tokens, its tokens never above max_model_len,
                   outputs never above what it asked for; waiting means nothing computed
    the clock      finite, never going back, and every step moving it (a step too short for the
                   float to register means frozen time: every latency would read 0)
    progress       some token sampled or some request finished within 2 x max_model_len + 16
                   steps: the oldest running request gains a token every step and is never the
                   one preempted, so more steps without progress is a livelock, reported as
                   an error instead of a hang
    the end        every request finished with all its tokens (capped at max_model_len) or was
                   rejected with a reason; the pool whole again

`InvariantChecker` stands between the engine loop and a mode: the loop asks it for the scheduler
(`make_scheduler`, which it passes on to the mode and keeps hold of) and calls it after every
step as an observer. Counted in bulk (running_decodes.py), the running decodes' own counters lag
behind the group's; the checker syncs them before reading (harmless: the group's sums do not
move), or, made with `every_request=True`, turns the bulk path off and checks the plain rules.

Exhaustive checks (the free list, every held block's holders and cached content) cost a pass
over the whole pool; they run every step for a pool of up to FULL_CHECK_BLOCKS blocks (every
test's small pools), every FULL_CHECK_EVERY steps beyond, and, for a pool so big that this
would cost more than FULL_CHECK_BLOCKS_PER_STEP blocks' worth a step, less often still. A new
kind of state brings its rule here, beside the ones it changes.
"""

import math
import os
from collections import Counter

from config import ConfigError
from kv_cache import PagedKVCache, num_blocks_for
from request import RequestStatus
from bulk_scheduler import GroupedDecodes
from scheduler import Scheduler
from static_batching import StaticBatchScheduler

ENVIRONMENT_VARIABLE = "SERVESIM_CHECK_INVARIANTS"  # "1": check; "every-request": plain rules too
FULL_CHECK_BLOCKS = 4096
FULL_CHECK_EVERY = 512
FULL_CHECK_BLOCKS_PER_STEP = 256  # a bigger pool's full checks spaced to cost about this a step


class InvariantViolation(AssertionError):
    """An invariant broke: a bug in servesim, never a user's mistake."""


LEVELS = {"": "", "0": "", "1": "1", "every-request": "every-request"}  # value -> what it asks


def wanted() -> str:
    """"" (off: unset, empty or 0), "1" or "every-request": what the environment asks for.
    Any other value is refused in one line, before anything runs (commands/cli.py asks first),
    rather than guessed at."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if value.strip() not in LEVELS:
        raise ConfigError(f"{ENVIRONMENT_VARIABLE}={value!r} is not understood; set it to 1 "
                          "(check every step), every-request (and the plain rules too), or 0 "
                          "or nothing (off)")
    return LEVELS[value.strip()]


class InvariantChecker:
    def __init__(self, mode, config, every_request: bool = False):
        self.mode = mode
        self.config = config
        self.needs_every_request = every_request
        self.scheduler = None
        self.previous_end_s = 0.0
        self.steps_without_progress = 0
        self.max_steps_without_progress = 2 * config.max_model_len + 16
        self.replica_checkers: list["InvariantChecker"] = []  # a cluster's engines, if any
        self.receiving = ()  # a decode engine's requests holding blocks while their KV lands

    # -- the engine loop's side ---------------------------------------------------------------

    def for_replica(self) -> "InvariantChecker":
        """A checker of its own for one engine of a cluster (cluster.py), which `check_end`
        checks with the others."""
        checker = InvariantChecker(self.mode, self.config, self.needs_every_request)
        self.replica_checkers.append(checker)
        return checker

    def make_scheduler(self, config, num_gpu_blocks: int, acceptance_rng, in_bulk: bool = False):
        self.scheduler = self.mode.make_scheduler(config, num_gpu_blocks, acceptance_rng, in_bulk)
        return self.scheduler

    def caches_prefixes(self, config) -> bool:
        return self.mode.caches_prefixes(config)

    def uses_async_scheduling(self, config) -> bool:
        return self.mode.uses_async_scheduling(config)

    def __call__(self, step) -> None:
        self._check_clock(step)
        self._check_batch(step)
        self._check_progress(step)
        self._check_finished(step)
        self._sync()
        full = self._full_check_due(step.index)
        self._check_requests(full)
        if isinstance(self.scheduler.kv_cache, PagedKVCache):
            self._check_blocks(full)
        else:
            self._check_reservations()

    def check_end(self, recorder, workload) -> None:
        """After the run: every request ended, as it should have, and the pool is whole."""
        num_requests = sum(1 for _ in workload.make_requests())
        if len(recorder.status) != num_requests or recorder.num_ended != num_requests:
            fail(f"{len(recorder.status)} of the workload's {num_requests} requests arrived, "
                 f"{recorder.num_ended} ended")
        if recorder.num_completed + len(recorder.rejections()) != num_requests:
            fail("a request neither finished nor was rejected")
        for rejection in recorder.rejections():
            if not rejection.reject_reason:
                fail(f"request {rejection.request_id} was rejected without a reason")
        for checker in self.replica_checkers:
            checker.check_pool_whole()
        if not self.replica_checkers:
            self.check_pool_whole()

    def check_pool_whole(self) -> None:
        scheduler, kv_cache = self.scheduler, self.scheduler.kv_cache
        if scheduler.running or scheduler.waiting:
            fail(f"{len(scheduler.running)} running, {len(scheduler.waiting)} waiting at the end")
        if kv_cache.num_used_slots or kv_cache.num_reserved_slots:
            fail(f"KV still held after the run: {kv_cache.num_reserved_slots} slots")
        if isinstance(kv_cache, PagedKVCache):
            self._check_blocks(full=True)

    # -- the checks ---------------------------------------------------------------------------

    def _check_clock(self, step) -> None:
        start_s, step_s = step.start_s, step.step_s
        if step.batch.is_empty and step_s == 0:  # async scheduling: nobody left to compute
            return                               # while the previous batch's output comes
        if not (math.isfinite(start_s) and math.isfinite(step_s) and step_s > 0):
            fail(f"step {step.index}: clock at {start_s!r} s, a step of {step_s!r} s")
        # The loop reports a step's start as its end minus its length, which rounds by a few
        # ulps: a clock "back" by a millionth of a millionth of itself is that rounding.
        if start_s < self.previous_end_s * (1 - 1e-12):
            fail(f"step {step.index}: the clock went back from {self.previous_end_s!r} to "
                 f"{start_s!r} s")
        if start_s + step_s == start_s:
            fail(f"step {step.index}: a {step_s!r} s step does not move a clock at {start_s!r} s "
                 "(frozen time)")
        self.previous_end_s = start_s + step_s

    def _check_batch(self, step) -> None:
        batch, scheduler, max_num_seqs = step.batch, self.scheduler, self.config.max_num_seqs
        if batch.num_seqs > max_num_seqs or len(scheduler.running) > max_num_seqs:
            fail(f"step {step.index}: {batch.num_seqs} sequences in the batch, "
                 f"{len(scheduler.running)} running, max_num_seqs {max_num_seqs}")
        if (isinstance(scheduler, Scheduler)
                and batch.num_scheduled_tokens > scheduler.max_num_batched_tokens):
            fail(f"step {step.index}: {batch.num_scheduled_tokens} tokens, over the budget of "
                 f"{scheduler.max_num_batched_tokens}")
        for scheduled in batch.scheduled:
            if scheduled.num_new_tokens < 1:
                fail(f"step {step.index}: request {scheduled.request.request_id} scheduled for "
                     f"{scheduled.num_new_tokens} tokens")

    def _check_progress(self, step) -> None:
        if step.result.num_sampled or step.result.finished:
            self.steps_without_progress = 0
            return
        self.steps_without_progress += 1
        if self.steps_without_progress > self.max_steps_without_progress:
            fail(f"livelock: {self.steps_without_progress} steps without a token sampled or a "
                 f"request finished, up to step {step.index} at {step.start_s:.6f} s")

    def _check_finished(self, step) -> None:
        """A finished request got exactly its tokens: what it asked for, cut at max_model_len."""
        max_model_len = self.config.max_model_len
        for request in step.result.finished:
            expected = min(request.max_tokens, max_model_len - request.prompt_len)
            if request.status is not RequestStatus.FINISHED or (
                    request.num_output_tokens != expected):
                fail(f"request {request.request_id} ended {request.status} with "
                     f"{request.num_output_tokens} of {expected} output tokens")

    def _sync(self) -> None:
        """The decodes counted in bulk, brought up to the group's step (running_decodes.py)."""
        scheduler = self.scheduler
        if isinstance(scheduler, GroupedDecodes):
            self._check_group_order(scheduler)
            scheduler.decodes.sync_all()
        elif isinstance(scheduler, StaticBatchScheduler):
            scheduler.unfinished.sync_all()

    def _check_group_order(self, scheduler) -> None:
        """The bulk schedulers read the group's members, and each step's crossing ones, in the
        order they joined, as RUNNING's order (bulk_scheduler.GroupedDecodes)."""
        decodes, position = scheduler.decodes, {r: i for i, r in enumerate(scheduler.running)}
        lists = [decodes.members()] + [list(decodes.crossing_at(step).values())
                                       for step in range(decodes.block_size)]
        for requests in lists:
            order = [position.get(request, -1) for request in requests]
            if order != sorted(order) or -1 in order:
                fail(f"the decode group's members are out of RUNNING's order: "
                     f"{[request.request_id for request in requests]}")

    def _check_requests(self, full: bool) -> None:
        """Every running request; the waiting ones on a full check (the queue can be long), the
        head (where a preempted request goes) on every step."""
        max_model_len = self.config.max_model_len
        running_statuses = (RequestStatus.RUNNING, RequestStatus.FINISHED)  # STATIC's finished
        for request in self.scheduler.running:                              # members pad
            computed, tokens = request.num_computed_tokens, request.num_tokens
            in_flight = request.num_output_placeholders  # async scheduling: tokens to come
            if (request.status not in running_statuses or not 0 <= computed <= tokens + in_flight
                    or tokens > max_model_len or request.num_output_tokens > request.max_tokens):
                fail(f"running request {request.request_id} ({request.status}): {computed} "
                     f"computed of {tokens} tokens, {request.num_output_tokens} of "
                     f"{request.max_tokens} outputs, max_model_len {max_model_len}")
        waiting = self.scheduler.waiting
        for request in (waiting if full else [waiting[0]] if waiting else []):
            if request.num_computed_tokens or request.status not in (RequestStatus.WAITING,
                                                                     RequestStatus.PREEMPTED):
                fail(f"waiting request {request.request_id} ({request.status}) has "
                     f"{request.num_computed_tokens} tokens computed")

    def _check_blocks(self, full: bool) -> None:
        kv_cache, running = self.scheduler.kv_cache, [*self.scheduler.running, *self.receiving]
        pool, tables = kv_cache.pool, kv_cache.block_tables
        num_shared_holds = pool.num_shared_holds  # holders beyond a block's first
        num_held = sum(len(table) for table in tables.values()) - num_shared_holds
        if pool.num_free_blocks + num_held != pool.num_blocks:
            fail(f"{pool.num_free_blocks} free + {num_held} held blocks, of {pool.num_blocks}")
        if len(tables) > len(running):
            fail(f"{len(tables)} block tables for {len(running)} running requests")
        spare = 2 * self.scheduler.speculation.num_speculative_tokens  # drafts and lookahead
        num_computed = 0
        for request in running:
            held = len(tables.get(request.request_id, ()))
            needed = num_blocks_for(request.num_computed_tokens, kv_cache.block_size)
            most = num_blocks_for(request.num_computed_tokens + spare, kv_cache.block_size)
            if not needed <= held <= most:
                fail(f"request {request.request_id} holds {held} blocks for "
                     f"{request.num_computed_tokens} computed tokens, which fill {needed}")
            num_computed += request.num_computed_tokens
        num_shared_slots = num_shared_holds * kv_cache.block_size
        if kv_cache.num_used_slots != num_computed - num_shared_slots:
            fail(f"{kv_cache.num_used_slots} KV slots used; the running requests computed "
                 f"{num_computed} tokens, {num_shared_slots} of them in shared blocks")
        if full:
            holders = Counter(block for table in tables.values() for block in table)
            if sum(holders.values()) - len(holders) != num_shared_holds:
                fail(f"the pool counts {num_shared_holds} shared holds, the block tables "
                     f"{sum(holders.values()) - len(holders)}")
            for request in running:
                self._check_cached_content(request, tables.get(request.request_id, []))
            self._check_every_block_in_one_place(set(holders))

    def _check_cached_content(self, request, table: list[int]) -> None:
        """A held block found by a hash is found by the hash of the request's tokens there."""
        pool = self.scheduler.kv_cache.pool
        for index, block_id in enumerate(table):
            entry = pool.cache_entry(block_id)
            if entry is not None and (index >= len(request.block_hashes)
                                      or request.block_hashes[index] != entry):
                fail(f"request {request.request_id}'s block {index} (block {block_id}) is "
                     "cached under another content's hash")

    def _check_every_block_in_one_place(self, held: set) -> None:
        pool = self.scheduler.kv_cache.pool
        free_list = pool.free_block_ids()
        free = set(free_list)
        if len(free) != len(free_list) or len(free) != pool.num_free_blocks:
            fail("a block is twice in the free queue, or the queue miscounts itself")
        if free & held or free | held != set(range(1, pool.num_blocks + 1)):
            fail("a block is both free and held, or its id is outside the pool (1 .. num_blocks)")
        for block_id in range(1, pool.num_blocks + 1):  # the free ones a prefix hit may take
            if pool.is_free(block_id) != (block_id in free
                                          and pool.cache_entry(block_id) is not None):
                fail(f"block {block_id} is {'' if pool.is_free(block_id) else 'not '}noted free "
                     "with a cache entry, but it is "
                     f"{'free' if block_id in free else 'held'} with "
                     f"{'an' if pool.cache_entry(block_id) is not None else 'no'} entry")

    def _check_reservations(self) -> None:
        kv_cache, batch = self.scheduler.kv_cache, self.scheduler.running
        if not kv_cache.num_reservations == len(batch) <= kv_cache.max_num_reservations:
            fail(f"{kv_cache.num_reservations} reservations for a batch of {len(batch)} "
                 f"(at most {kv_cache.max_num_reservations})")
        num_computed = sum(request.num_computed_tokens for request in batch)
        if kv_cache.num_used_slots != num_computed:
            fail(f"{kv_cache.num_used_slots} KV slots used; the batch computed {num_computed}")

    def _full_check_due(self, step_index: int) -> bool:
        """Every step while the state is small (the pool, or STATIC's queue), else now and then."""
        kv_cache = self.scheduler.kv_cache
        if isinstance(kv_cache, PagedKVCache):
            size = kv_cache.pool.num_blocks
        else:
            size = len(self.scheduler.waiting)
        every = max(FULL_CHECK_EVERY, size // FULL_CHECK_BLOCKS_PER_STEP)
        return size <= FULL_CHECK_BLOCKS or step_index % every == 0


def fail(problem: str) -> None:
    raise InvariantViolation(problem)
