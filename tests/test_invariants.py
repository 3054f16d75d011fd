"""Invariants checked after every step of a busy, memory-starved run of the V1 scheduler, and
the invariant checker (commands/invariants.py) caught in the act on each state it forbids."""

import random

import pytest

from batch import EngineStep, SchedulerOutput, StepResult
from commands.invariants import InvariantChecker, InvariantViolation
from bulk_scheduler import BulkScheduler
from config import EngineConfig
from conftest import make_request, make_scheduler
from kv_cache import num_blocks_for
from modes import MODES
from request import Request, RequestStatus


def drive_to_completion(scheduler, requests, max_steps=20_000):
    """Add everything, then step until done, checking the invariants after every step."""
    for request in requests:
        scheduler.add_request(request)
    kv = scheduler.kv_cache
    for _ in range(max_steps):
        if not scheduler.has_unfinished_requests():
            return
        output = scheduler.schedule(0.0)
        assert output.num_scheduled_tokens <= scheduler.max_num_batched_tokens
        assert len(scheduler.running) <= scheduler.max_num_seqs
        scheduler.update_from_output(output, 0.0)
        if isinstance(scheduler, BulkScheduler):
            scheduler.decodes.sync_all()  # the decodes' own counters, as the rules see them
        held = sum(len(table) for table in kv.block_tables.values())
        assert kv.num_free_blocks + held == kv.pool.num_blocks  # blocks taken and returned balance
        for request in scheduler.running:  # a running request holds exactly its computed tokens
            assert len(kv.block_tables[request.request_id]) == num_blocks_for(
                request.num_computed_tokens, kv.block_size)
        for request in scheduler.waiting:
            assert request.request_id not in kv.block_tables
    raise AssertionError("not finished: the scheduler loops")


def test_a_starved_pool_preempts_but_every_request_finishes_and_blocks_balance(bulk):
    rng = random.Random(7)
    for chunked in (True, False):
        requests = [make_request(i, rng.randint(1, 60), max_tokens=rng.randint(1, 40))
                    for i in range(40)]
        scheduler = make_scheduler(bulk_decodes=bulk, num_blocks=30, block_size=4, budget=100, chunked=chunked,
                                   max_model_len=100)
        drive_to_completion(scheduler, requests)
        assert all(r.status is RequestStatus.FINISHED for r in requests)
        assert sum(r.num_preemptions for r in requests) > 0  # the pool really was too small
        assert scheduler.num_free_blocks == 30


# -- the checker itself: each rule fires on the state it forbids -------------------------------

def checker_and_step(**step_fields):
    """A checker watching a fresh CONTINUOUS+CHUNKED scheduler, and one step to show it."""
    config = EngineConfig(max_model_len=64)
    checker = InvariantChecker(MODES["chunked"], config)
    checker.make_scheduler(config, 8, random.Random(0))
    fields = dict(index=0, start_s=0.0, step_s=0.01, batch=SchedulerOutput(),
                  result=StepResult(num_bulk_sampled=1), num_running=0, num_waiting=0,
                  num_free_blocks=8, kv_reserved_slots=0, kv_used_slots=0)
    fields.update(step_fields)
    return checker, EngineStep(**fields)


def test_the_checker_passes_a_sound_step_and_catches_a_block_counted_twice():
    checker, step = checker_and_step()
    checker(step)
    pool = checker.scheduler.kv_cache.pool
    pool._front.append(2)  # as many free blocks as ever, but block 2 twice and block 1 lost
    pool._next_unused = 2
    step.index, step.start_s = 1, 0.01
    with pytest.raises(InvariantViolation, match="twice in the free queue"):
        checker(step)


def test_the_checker_catches_frozen_time_and_time_going_back():
    checker, step = checker_and_step(start_s=1e17, step_s=1e-3)  # 1e17 + 1e-3 == 1e17
    with pytest.raises(InvariantViolation, match="frozen time"):
        checker(step)
    checker, step = checker_and_step(start_s=5.0)
    checker(step)
    _, earlier = checker_and_step(start_s=1.0)
    with pytest.raises(InvariantViolation, match="the clock went back from 5.01 to 1.0 s"):
        checker(earlier)


def test_the_checker_turns_a_livelock_into_an_error():
    checker, step = checker_and_step(result=StepResult())  # nothing sampled, nobody finished
    with pytest.raises(InvariantViolation, match="livelock: 145 steps without a token sampled"):
        for index in range(1000):  # bound: 2 x max_model_len 64 + 16 = 144 steps
            step.index, step.start_s = index, index * 0.01
            checker(step)


def test_the_checker_catches_a_request_that_finished_short():
    request = Request("r", 0.0, 10, 5, num_output_tokens=3)
    request.admit()
    request.finish()
    checker, step = checker_and_step(result=StepResult(finished=[request]))
    with pytest.raises(InvariantViolation, match="ended RequestStatus.FINISHED with 3 of 5"):
        checker(step)


def test_the_checker_catches_a_decode_group_out_of_running_order():
    config = EngineConfig(max_model_len=64, async_scheduling=False)
    checker = InvariantChecker(MODES["chunked"], config)
    scheduler = checker.make_scheduler(config, 8, random.Random(0), in_bulk=True)
    assert isinstance(scheduler, BulkScheduler)
    first, second = Request("a", 0.0, 4, 5), Request("b", 0.0, 4, 5)
    for request in (first, second):
        scheduler.add_request(request)
    scheduler.update_from_output(scheduler.schedule(0.0), 0.01)  # both prefilled: decodes
    scheduler.decodes.release_all()
    scheduler.decodes.join(second)  # b joins before a, which RUNNING admitted first
    scheduler.decodes.join(first)
    _, step = checker_and_step()
    with pytest.raises(InvariantViolation, match=r"out of RUNNING's order: \['b', 'a'\]"):
        checker(step)
