"""Prefix caching's rules on small cases worked by hand, and on real and synthetic workloads."""

import gzip
import json
import random

import pytest

from config import EngineConfig
from conftest import ROOT, make_request, servesim_here
from forward_model import make_clock
from gpu_memory import plan_memory
from kv_cache import PagedKVCache
from main import simulate
from modes import MODES
from request import TokenContent
from traces.replay import trace_workload
from workload import prefix_repetition_workload, random_workload

MOONCAKE = ROOT / "code" / "traces" / "data" / "mooncake-conversation.jsonl.gz"


def with_tokens(request_id, token_ids, max_tokens=4, outputs=None):
    request = make_request(request_id, len(token_ids), max_tokens)
    request.content = TokenContent.of([tuple(token_ids)], outputs)
    return request


def admit(kv, request):
    """What the scheduler does for a waiting request: look up, take the hits, allocate."""
    cached = kv.find_cached_prefix(request)
    kv.admit_cached(request, cached)
    num_cached = len(cached) * kv.block_size
    kv.allocate_slots(request, num_cached, request.num_tokens - num_cached)
    request.num_computed_tokens = request.num_tokens
    return num_cached


def test_a_block_is_known_by_its_tokens_however_the_runs_are_cut():
    whole = TokenContent.of([(1, 2, 3, 4, 5, 6)])
    cut = TokenContent.of([(1, 2, 3)], output_token_ids=(4, 5, 6))
    assert whole.block_keys(0, 1, 4) == cut.block_keys(0, 1, 4)  # tokens 1..4, cut after 3
    assert whole.block_keys(0, 2, 3) == cut.block_keys(0, 2, 3)
    assert cut.block_keys(1, 2, 4) == []  # tokens 4..7: past what is known, nobody else's


def test_equal_block_hashes_mean_equal_tokens_from_the_first_however_the_tokens_are_named():
    """Block hashes (a hash id's blocks numbered on from one hash, other blocks chained one by
    one) against the oracle: block i of one sequence and block j of another have equal hashes
    exactly when i == j and their tokens up to the end of the block are the same."""
    rng = random.Random(22)
    block_size, contents = 4, []
    for _ in range(60):
        pieces = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.7:  # named tokens: source (1, h), from its first token
                pieces.append(((1, rng.randint(1, 3)), rng.choice([3, 4, 8, 9])))
            else:
                pieces.append(tuple(rng.randint(1, 2) for _ in range(rng.randint(1, 6))))
        contents.append(TokenContent.of(pieces))
    kv = PagedKVCache(8, block_size, enable_prefix_caching=True)
    seen, num_hashed = {}, 0  # block hash -> the tokens up to the end of its block
    for index, content in enumerate(contents):
        request = make_request(str(index), content.known_length, 1)
        request.content = content
        num_blocks = content.known_length // block_size
        kv.block_hashes(request, rng.randint(0, num_blocks))  # hashed in two goes, or one
        hashes = kv.block_hashes(request, num_blocks)
        tokens = [(run.source, j) if run.source else (0, run.token_ids[j])
                  for run in content.runs for j in range(run.length)]
        for block, block_hash in enumerate(hashes):
            prefix = tuple(tokens[:(block + 1) * block_size])
            assert seen.setdefault(block_hash, prefix) == prefix
        num_hashed += len(hashes)
    assert len(set(seen.values())) == len(seen)  # different tokens, different hashes
    assert num_hashed - len(seen) > 50  # blocks hashed again elsewhere: shared ones


def test_only_whole_blocks_of_a_shared_prefix_hit_and_the_last_token_is_always_computed():
    kv = PagedKVCache(num_blocks=20, block_size=4, enable_prefix_caching=True)
    assert admit(kv, with_tokens("a", range(10))) == 0
    assert admit(kv, with_tokens("b", [0, 1, 2, 3, 4, 5, 6, 9, 9])) == 4   # block 1 differs
    assert admit(kv, with_tokens("c", range(8))) == 4    # both blocks cached, but the 8th token
    assert admit(kv, with_tokens("d", range(9))) == 8    # ... must be computed: one block less


def test_freed_blocks_stay_findable_and_free_until_handed_out_again():
    kv = PagedKVCache(num_blocks=4, block_size=4, enable_prefix_caching=True)
    a = with_tokens("a", range(8))
    admit(kv, a)
    kv.free(a)
    assert kv.num_free_blocks == 4  # the cached blocks count as free, as in vLLM
    assert admit(kv, with_tokens("b", range(9))) == 8
    assert kv.num_free_blocks == 1  # b took both cached blocks back from the free queue + one


def test_a_prompt_nobody_shares_finds_nothing_but_its_own_blocks_after_a_preemption():
    kv = PagedKVCache(num_blocks=8, block_size=4, enable_prefix_caching=True)
    a, b = make_request("a", 8), make_request("b", 8)  # no content: their tokens are their own
    admit(kv, a)
    assert admit(kv, b) == 0
    kv.free(a, preempted=True)
    a.num_preemptions = 1
    a.num_computed_tokens = 0
    assert kv.find_cached_prefix(a) and admit(kv, a) == 4  # 7 tokens findable: one block


def test_a_conversation_turn_finds_the_blocks_its_answer_filled():
    kv = PagedKVCache(num_blocks=20, block_size=4, enable_prefix_caching=True)
    turn1 = with_tokens("turn1", [5] * 6, outputs=(8, 8, 8))
    admit(kv, turn1)                 # the prefill computes tokens 0..5 and samples output 1
    turn1.append_output_token(0.1)
    kv.allocate_slots(turn1, 6, 1)   # a decode computes token 6 (output 1), samples output 2
    turn1.num_computed_tokens = 7
    turn1.append_output_token(0.2)
    assert admit(kv, with_tokens("early", [5] * 6 + [8, 8, 3])) == 4  # block 1 is not full yet
    kv.allocate_slots(turn1, 7, 1)   # token 7 (output 2) computed: block 1 (tokens 4..7) is full
    turn1.num_computed_tokens = 8
    turn2 = with_tokens("turn2", [5] * 6 + [8, 8, 3, 3])
    assert admit(kv, turn2) == 8


def test_without_shared_prefixes_or_preemption_caching_changes_nothing(capsys):
    outputs = []
    for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        code, out, _ = servesim_here(capsys, "--format", "json", "--num-prompts", "30", flag)
        document = json.loads(out)
        del document["config"]["enable_prefix_caching"]
        for result in document["results"]:
            for key in [key for key in result if key.startswith("prefix_cache")]:
                assert result[key] == 0 or key.endswith("queries")
                del result[key]
        outputs.append(document)
    assert outputs[0] == outputs[1]


def test_shared_prefixes_of_vllms_synthetic_datasets_are_found():
    config = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", max_model_len=2048)
    # 10 prefixes of 256 tokens, 3 prompts each of 256 + 256: the first of each misses.
    workload = prefix_repetition_workload(256, 256, 10, 16, num_prompts=30, request_rate=4.0)
    summary = simulate(workload, MODES["chunked"], config, 4000, make_clock(config)).summary()
    assert summary["prefix_cache_hits"] == 20 * 256
    assert summary["prefix_cache_hit_rate"] == pytest.approx(100 * 20 * 256 / (30 * 512))
    # --random-prefix-len: one prefix for all; a 100-token prefix is 6 whole blocks.
    workload = random_workload(200, 16, 0.0, num_prompts=5, request_rate=1.0, prefix_len=100)
    summary = simulate(workload, MODES["chunked"], config, 4000, make_clock(config)).summary()
    assert summary["prefix_cache_hits"] == 4 * 6 * 16


def mooncake_run(num_requests: int, num_gpu_blocks=None) -> tuple[list[dict], dict]:
    """The first requests of the Mooncake conversation trace on one H100 (Llama-3.1-8B), at a
    quarter of the trace's rate: its rows, and the run's summary."""
    rows = [json.loads(line) for _, line in zip(range(num_requests), gzip.open(MOONCAKE, "rt"))]
    config = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", max_model_len=131072,
                          max_num_batched_tokens=8192)
    workload = trace_workload("mooncake-conversation", num_prompts=num_requests, time_scale=4.0)
    num_gpu_blocks = num_gpu_blocks or plan_memory(config).num_gpu_blocks
    summary = simulate(workload, MODES["chunked"], config, num_gpu_blocks, make_clock(config))
    return rows, summary.summary()


def test_a_pool_that_never_evicts_finds_what_the_hash_ids_share():
    """The bound, straight from the hash ids: each request's longest run of leading ids that an
    earlier request had, in whole 512-token blocks, at most (input_length - 1) // 512 of them."""
    rows, summary = mooncake_run(500, num_gpu_blocks=10**6)
    seen, bound_hits = set(), 0
    for row in rows:
        ids, shared = row["hash_ids"], 0
        while shared < (row["input_length"] - 1) // 512 and tuple(ids[:shared + 1]) in seen:
            shared += 1
        bound_hits += 512 * shared
        seen.update(tuple(ids[:i]) for i in range(1, row["input_length"] // 512 + 1))
    bound_pct = 100 * bound_hits / sum(row["input_length"] for row in rows)
    assert summary["completed"] == len(rows) and bound_pct > 10  # 16.4%
    assert abs(summary["prefix_cache_hit_rate"] - bound_pct) < 1.0


def test_one_gpus_pool_keeps_only_the_prefix_every_request_shares():
    """Between two turns of a conversation, more prompt tokens arrive than one H100 holds: an
    earlier turn's blocks are handed out again before the next turn comes, and the only hits
    left are the first 512-token block that every request of the trace shares."""
    rows, summary = mooncake_run(500)
    last_seen, tokens_sent, tokens_between_turns = {}, 0, []
    for row in rows:
        ids = row["hash_ids"]
        shared = 0
        while tuple(ids[:shared + 1]) in last_seen and shared < len(ids):
            shared += 1
        if shared > 1:  # a conversation's next turn: it repeats more than the system prompt
            tokens_between_turns.append(tokens_sent - last_seen[tuple(ids[:shared])])
        tokens_sent += row["input_length"]
        last_seen.update((tuple(ids[:i]), tokens_sent) for i in range(1, len(ids) + 1))
    pool_tokens = plan_memory(EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5",
                                           max_model_len=131072)).kv_cache_tokens
    assert len(tokens_between_turns) > 50 and min(tokens_between_turns) > pool_tokens
    assert {row["hash_ids"][0] for row in rows} == {0}
    num_sharing = sum(1 for row in rows[1:] if row["input_length"] > 512)
    assert summary["prefix_cache_hits"] == 512 * num_sharing


def test_an_eagle_head_computes_the_last_block_it_found_again(capsys):
    """vLLM drops the last matched block when an EAGLE head drafts: the head needs that block's
    hidden states, which the cache does not keep."""
    for drop_last_hit, expected in ((False, 8), (True, 4)):
        kv = PagedKVCache(num_blocks=20, block_size=4, enable_prefix_caching=True,
                          drop_last_hit=drop_last_hit)
        admit(kv, with_tokens("first", range(10)))
        assert admit(kv, with_tokens("second", range(10))) == expected
    hits = []
    for speculating in ([], ["--speculative-config", '{"method": "eagle3", "num_speculative_'
                                                     'tokens": 2, "model": "eagle3-head"}']):
        code, out, err = servesim_here(
            capsys, "run", "--mode", "chunked", "--dataset-name", "random",
            "--random-prefix-len", "100", "--random-input-len", "20", "--random-output-len", "4",
            "--num-prompts", "3", "--model", "llama-3.1-8b", "--gpu", "h100-sxm5",
            "--format", "json", *speculating)
        assert code == 0, err
        hits.append(json.loads(out)["results"][0]["prefix_cache_hits"])
    assert hits == [2 * 96, 2 * 80]  # six whole blocks of the prefix, or five
