"""PagedAttention's block pool and block tables, and the contiguous allocator it replaced."""

from conftest import make_request
from kv_cache import ContiguousKVCache, PagedKVCache, num_blocks_for


def holding(request, num_computed):
    request.num_computed_tokens = num_computed
    return request


def test_a_block_is_taken_only_when_tokens_cross_a_block_boundary():
    kv = PagedKVCache(num_blocks=10, block_size=16)
    r = make_request("r", 16)
    assert kv.allocate_slots(r, num_computed=0, num_new_tokens=16)
    assert len(kv.block_tables["r"]) == 1          # 16 tokens: exactly one block
    assert kv.allocate_slots(r, num_computed=16, num_new_tokens=1)
    assert len(kv.block_tables["r"]) == 2          # the 17th token crosses into a second
    for computed in range(17, 32):
        assert kv.allocate_slots(r, num_computed=computed, num_new_tokens=1)
    assert len(kv.block_tables["r"]) == 2          # ...which holds tokens 17..32
    assert kv.num_free_blocks == 8


def test_block_table_maps_logical_blocks_to_distinct_physical_ids():
    kv = PagedKVCache(num_blocks=6, block_size=4)
    a, b = make_request("a", 12), make_request("b", 4)
    kv.allocate_slots(a, 0, 8)
    kv.allocate_slots(b, 0, 4)
    kv.allocate_slots(a, 8, 4)
    ids = kv.block_tables["a"] + kv.block_tables["b"]
    assert len(kv.block_tables["a"]) == 3 and len(set(ids)) == 4
    assert set(ids) <= set(range(1, 7))  # block 0 is vLLM's null block, never handed out


def test_finishing_returns_every_block_and_the_used_slots():
    kv = PagedKVCache(num_blocks=4, block_size=4)
    a = make_request("a", 6)
    kv.allocate_slots(a, 0, 6)
    assert (kv.num_reserved_slots, kv.num_used_slots) == (8, 6)  # 2 empty slots in block 2
    kv.free(holding(a, 6))
    assert (kv.num_free_blocks, kv.num_reserved_slots, kv.num_used_slots) == (4, 0, 0)


def test_freed_blocks_are_handed_out_again_first_tail_first_as_vllm_0_30_does():
    # Without prefix caching, vLLM 0.30.0's BlockPool puts freed blocks at the front of the free
    # queue, the request's last block first (block_pool.py free_blocks: prepend_n).
    kv = PagedKVCache(num_blocks=8, block_size=4)
    a, b = make_request("a", 12), make_request("b", 4)
    kv.allocate_slots(a, 0, 12)
    assert kv.block_tables["a"] == [1, 2, 3]
    kv.free(holding(a, 12))
    kv.allocate_slots(b, 0, 4)
    assert kv.block_tables["b"] == [3]


def test_allocation_that_does_not_fit_takes_nothing():
    kv = PagedKVCache(num_blocks=2, block_size=4)
    assert not kv.allocate_slots(make_request("a", 9), 0, 9)  # needs 3 blocks
    assert kv.num_free_blocks == 2 and "a" not in kv.block_tables


def test_decodes_in_bulk_take_blocks_only_where_they_cross_a_boundary():
    kv = PagedKVCache(num_blocks=10, block_size=4)
    kv.allocate_slots(make_request("a", 4), 0, 4)  # a's block is full: its next token needs one
    kv.allocate_slots(make_request("b", 3), 0, 3)  # b has room for one more
    kv.append_blocks(["a"])
    kv.fill_slots(2)
    assert [len(kv.block_tables[r]) for r in "ab"] == [2, 1]
    assert kv.num_used_slots == 9 and kv.num_free_blocks == 7


def test_a_runs_blocks_taken_at_once_are_those_taken_step_by_step():
    """append_run_blocks (a run's steps, decode_runs.py): one take from the pool, handed out in
    the rules' order (each step's crossing decodes, then the prompt's chunk), is what the same
    takes one after another hand out."""
    def tables_after(at_once: bool):
        kv = PagedKVCache(num_blocks=40, block_size=4)
        for name in "abcp":
            kv.allocate_slots(make_request(name, 8), 0, 8)
        kv.free(make_request("b", 8))  # its two blocks back to the queue, to be taken first
        steps = [(["a", "c"], 3), ([], 2), (["c"], 0), (["a"], 1)]
        if at_once:
            kv.append_run_blocks(steps, "p")
        else:
            for crossing, num_prompt_blocks in steps:
                kv.append_blocks(crossing)
                kv.append_blocks(["p"] * num_prompt_blocks)
        return kv.block_tables, kv.num_free_blocks, kv.num_reserved_slots

    tables, num_free_blocks, _ = tables_after(True)
    assert tables_after(True) == tables_after(False)
    assert [len(tables[name]) for name in "acp"] == [2 + 2, 2 + 2, 2 + 6]
    assert tables["a"][2] == 4 and num_free_blocks == 40 - 6 - 10  # b's tail block, first


def test_contiguous_reservation_wastes_what_the_request_does_not_use():
    # The lesson's example: reserve 8,192 slots, use 1,500 -> about 82% of the reservation wasted.
    kv = ContiguousKVCache(num_total_slots=3 * 8192, max_model_len=8192)
    assert kv.max_num_reservations == 3
    kv.reserve()
    kv.fill(1500)
    waste = (kv.num_reserved_slots - kv.num_used_slots) / kv.num_reserved_slots
    assert round(100 * waste) == 82
    kv.free(num_cached_tokens=1500)
    assert kv.num_free_reservations == 3


def test_num_blocks_for_rounds_up():
    assert [num_blocks_for(n, 16) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_blocks_of_one_content_are_found_first_cached_first_however_they_are_cached():
    from block_pool import BlockPool
    pool = BlockPool(8)
    blocks = pool.take(5)                              # [1, 2, 3, 4, 5]
    pool.cache_full_blocks(blocks[:3], [70, 71, 70])   # a content twice in one go
    pool.cache_full_blocks(blocks[3:], [71, 72])       # and once more
    assert [pool.find(h) for h in (70, 71, 72)] == [1, 2, 5]
    pool.free(blocks, num_cached_blocks=5)             # the back, tail first: 5, 4, 3, 2, 1
    pool.take(3 + 3)                                   # the unused 6..8, then 5, 4 and 3
    assert [pool.find(h) for h in (70, 71, 72)] == [1, 2, None]
    pool.take(1)                                       # block 2 goes: 71 was block 4's too
    assert [pool.find(h) for h in (70, 71)] == [1, None]
