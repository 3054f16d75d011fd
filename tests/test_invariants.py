"""Invariants checked after every step of a busy, memory-starved run of the V1 scheduler."""

import random

from conftest import make_request, make_scheduler
from kv_cache import num_blocks_for
from request import RequestStatus


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
