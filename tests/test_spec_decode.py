"""Speculative decoding in the V1 scheduler, step by step, against tables worked out by hand.

Acceptance is pinned with vLLM's synthetic rates, so every step is exact: rates (1, 1, 1) accept
every draft, (1, 0, 0) exactly one, (0, 0, 0) none. Each table was also run through vLLM 0.30.0's
own Scheduler with a fake model runner (a throwaway driver outside the project, see the README
section on speculative decoding): the same tokens, drafts, computed tokens and free blocks.
"""

import json
import random

from conftest import make_request, make_scheduler
from kv_cache import num_blocks_for
from request import RequestStatus
from commands.speculative_flag import parse_speculative_config

ALL, ONE, NONE = (1.0, 1.0, 1.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0)


def speculating(method="ngram", rates=ALL, **scheduler_args):
    """A scheduler whose proposer drafts 3 tokens and whose target accepts them at `rates`."""
    keys = {"method": method, "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": list(rates)}
    keys["model"] = {"draft_model": "llama-3.2-1b", "eagle3": "an-eagle3-head"}.get(method)
    speculation = parse_speculative_config(json.dumps(keys)).speculation(random.Random(0))
    scheduler_args.setdefault("num_blocks", 100)
    return make_scheduler(speculation=speculation, bulk_decodes=False, **scheduler_args)


def steps(scheduler, num_steps, requests=()):
    """Add `requests`, then step; per step ({id: tokens}, {id: drafts among them}, free blocks)."""
    for request in requests:
        scheduler.add_request(request)
    rows = []
    for _ in range(num_steps):
        output = scheduler.schedule(0.0)
        scheduler.update_from_output(output, 0.0)
        rows.append(({s.request.request_id: s.num_new_tokens for s in output.scheduled},
                     {s.request.request_id: s.num_draft_tokens for s in output.scheduled
                      if s.num_draft_tokens},
                     scheduler.num_free_blocks))
    return rows


def test_a_decode_verifies_its_drafts_and_a_prefill_chunk_gets_none():
    # 80-token prompt, budget 64: two chunks, the second samples the first token; then 1 + 3.
    a = make_request("a", 80, max_tokens=20)
    rows = steps(speculating(budget=64), 3, [a])
    assert [(scheduled, drafts) for scheduled, drafts, _ in rows] == [
        ({"a": 64}, {}),
        ({"a": 16}, {}),              # the chunk that finishes the prompt: still no drafts
        ({"a": 4}, {"a": 3}),         # the sampled token and its 3 drafts
    ]
    assert (a.num_computed_tokens, a.num_output_tokens) == (84, 5)  # all accepted: 1 + 3 + 1


def test_drafts_are_cut_when_the_budget_runs_short():
    # budget 10: a and b verify 1 + 3, c gets the 2 tokens left: its token and one draft.
    rows = steps(speculating(budget=10), 2, [make_request(i, 3) for i in "abc"])
    assert [(scheduled, drafts) for scheduled, drafts, _ in rows] == [
        ({"a": 3, "b": 3, "c": 3}, {}),
        ({"a": 4, "b": 4, "c": 2}, {"a": 3, "b": 3, "c": 1}),
    ]


def test_rejected_drafts_are_taken_back_from_num_computed_tokens():
    # 16-token prompt; the step after it computes 16 -> 20 (the token + 3 drafts).
    for rates, computed, outputs in ((ONE, 18, 3), (NONE, 17, 2), (ALL, 20, 5)):
        scheduler = speculating(rates=rates)
        a = make_request("a", 16)
        steps(scheduler, 2, [a])
        # one accepted: 20 - 2 rejected = 18, outputs 1 + (1 + 1); none: 20 - 3 = 17, 1 + 1
        assert (a.num_computed_tokens, a.num_output_tokens) == (computed, outputs), rates
        assert a.num_tokens == a.num_computed_tokens + 1  # one token behind: the next decode
        assert scheduler.kv_cache.num_used_slots == a.num_computed_tokens  # rejected: no token
        assert len(scheduler.kv_cache.block_tables["a"]) == 2  # the step's 20 slots stay held


def test_eagle_and_draft_model_proposers_reserve_k_lookahead_slots():
    # Blocks of 16 in a pool of 100. A 28-token prompt, then a decode of 1 + 3:
    # draft_model holds blocks for 28 + 3 = 31, then 32 + 3 = 35 slots (2, then 3 blocks);
    # n-gram for 28, then 32 (2 blocks).
    for method, free_after in (("draft_model", [98, 97]), ("eagle3", [98, 97]),
                               ("ngram", [98, 98])):
        rows = steps(speculating(method, budget=512), 2, [make_request("a", 28)])
        assert [free for _, _, free in rows] == free_after, method
    # Admission reserves them too: a 32-token prompt fills 2 blocks, + 3 lookahead needs a third.
    for method, free_after in (("draft_model", [97]), ("ngram", [98])):
        rows = steps(speculating(method, budget=512), 1, [make_request("a", 32)])
        assert [free for _, _, free in rows] == free_after, method


def test_a_draft_model_makes_each_scheduled_request_cost_one_more_token_of_budget():
    rows = steps(speculating("draft_model", budget=64), 1, [make_request("a", 80)])
    assert rows[0][0] == {"a": 63}  # 64 - 1 slot for the draft model's extra input token
    # budget 10: a and b each cost 4 + 1; nothing is left for c, which waits for its turn.
    rows = steps(speculating("draft_model", budget=10), 2, [make_request(i, 2) for i in "abc"])
    assert [scheduled for scheduled, _, _ in rows] == [{"a": 2, "b": 2, "c": 2}, {"a": 4, "b": 4}]


def test_drafts_are_cut_to_fit_max_model_len():
    # max_model_len 90, prompt 80, every draft accepted: 80 -> 84 -> 88, then the last position
    # the model may compute is 89, so only the sampled token runs: 10 outputs, 90 tokens.
    a = make_request("a", 80, max_tokens=100)
    rows = steps(speculating(max_model_len=90), 4, [a])
    assert [(scheduled, drafts) for scheduled, drafts, _ in rows] == [
        ({"a": 80}, {}), ({"a": 4}, {"a": 3}), ({"a": 4}, {"a": 3}), ({"a": 1}, {})]
    assert a.status is RequestStatus.FINISHED and a.num_output_tokens == 10


def test_accepted_tokens_past_the_output_length_are_dropped():
    a = make_request("a", 16, max_tokens=3)  # first token, then 1 + 3 accepted: 2 more fit
    steps(speculating(), 2, [a])
    assert a.status is RequestStatus.FINISHED and a.num_output_tokens == 3


def test_preemption_drops_the_drafts_with_the_kv_and_every_request_still_finishes():
    rng = random.Random(3)
    requests = [make_request(i, rng.randint(1, 60), max_tokens=rng.randint(1, 40))
                for i in range(30)]
    scheduler = speculating("eagle3", rates=(0.8, 0.5, 0.3), num_blocks=30, block_size=4,
                            budget=100, max_model_len=100)
    for request in requests:
        scheduler.add_request(request)
    kv = scheduler.kv_cache
    for _ in range(5000):
        if not scheduler.has_unfinished_requests():
            break
        output = scheduler.schedule(0.0)
        assert output.num_scheduled_tokens <= scheduler.max_num_batched_tokens
        scheduler.update_from_output(output, 0.0)
        held = sum(len(table) for table in kv.block_tables.values())
        assert kv.num_free_blocks + held == kv.pool.num_blocks
        for request in scheduler.running:  # its computed tokens, plus lookahead and rejected
            assert len(kv.block_tables[request.request_id]) >= num_blocks_for(
                request.num_computed_tokens, kv.block_size)
        for request in scheduler.waiting:
            assert request.num_draft_tokens == 0 and request.request_id not in kv.block_tables
    assert all(r.status is RequestStatus.FINISHED for r in requests)
    assert sum(r.num_preemptions for r in requests) > 0  # the pool really was too small
    assert scheduler.num_free_blocks == 30
