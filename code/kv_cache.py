"""PagedAttention as a KV-cache allocator, and the contiguous allocator it replaced.

The KV cache is a pool of fixed-size blocks, each holding the keys and values of `block_size`
tokens. PagedAttention gives every request a *block table*: logical block i of the sequence
lives in physical block block_table[i], wherever that is in the pool.

    request "7", 35 tokens cached, block_size 16:
        logical block:   0     1     2
        block_table:  [ 12 ][  3 ][ 40 ]      <- physical ids, any order
        tokens held:    16    16     3        (13 slots of block 40 still empty)

A request takes a new block only when its tokens cross a block boundary, and returns all of its
blocks when it finishes (or is preempted). So the only waste is the unfilled tail of each
request's last block: under 16 slots per request.

The contiguous allocator does what servers did before: reserve `max_model_len` slots for every
admitted request up front, because its final length is unknown. A request that ends up using
1,500 of 8,192 slots wastes 82% of its reservation, and the reservation, not the real use,
limits how many requests fit.

Both count the slots they have reserved and the slots actually filled with real tokens, so KV
waste is a measured number: (reserved - used) / reserved.
"""

from collections import deque


def num_blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold `num_tokens` tokens: ceil(num_tokens / block_size)."""
    return -(-num_tokens // block_size)


class BlockPool:
    """The physical blocks: ids 0 .. num_blocks-1 and a free list of the ones nobody holds."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.free_block_ids = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def take(self, count: int) -> list[int]:
        """The `count` blocks at the front of the free list (the caller checked there are)."""
        take = self.free_block_ids.popleft
        return [take() for _ in range(count)]

    def give_back(self, block_ids: list[int]) -> None:
        self.free_block_ids.extend(block_ids)


class PagedKVCache:
    """Per-request block tables over one BlockPool (vLLM's KVCacheManager, prefix caching off)."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.block_tables: dict[str, list[int]] = {}
        self.num_used_slots = 0  # real tokens held, summed over requests

    @property
    def num_total_slots(self) -> int:
        return self.pool.num_blocks * self.block_size

    @property
    def num_reserved_slots(self) -> int:
        return (self.pool.num_blocks - self.pool.num_free_blocks) * self.block_size

    @property
    def num_free_blocks(self) -> int:
        return len(self.pool.free_block_ids)

    def num_new_blocks_needed(self, request_id: str, num_total_tokens: int) -> int:
        """Blocks to add so that the request can hold `num_total_tokens` tokens."""
        num_held = len(self.block_tables.get(request_id, ()))
        return max(0, num_blocks_for(num_total_tokens, self.block_size) - num_held)

    def can_fit(self, request_id: str, num_total_tokens: int) -> bool:
        return self.num_new_blocks_needed(request_id, num_total_tokens) <= self.num_free_blocks

    def allocate_slots(self, request_id: str, num_computed: int, num_new_tokens: int) -> bool:
        """Make room for `num_new_tokens` after `num_computed`; False (nothing taken) if full."""
        num_new_blocks = self.num_new_blocks_needed(request_id, num_computed + num_new_tokens)
        if num_new_blocks > len(self.pool.free_block_ids):
            return False
        if num_new_blocks:  # the tokens cross into blocks the request does not hold yet
            self.block_tables.setdefault(request_id, []).extend(self.pool.take(num_new_blocks))
        self.num_used_slots += num_new_tokens
        return True

    def append_blocks(self, request_ids: list[str]) -> None:
        """One more block for each request, whose last block is full (decodes crossing into a
        new block), in that order; the caller has checked that the pool holds them."""
        take, block_tables = self.pool.free_block_ids.popleft, self.block_tables
        for request_id in request_ids:
            block_tables[request_id].append(take())

    def add_decode_tokens(self, num_decodes: int) -> None:
        """`num_decodes` decodes each cache one more token (the ones that crossed into a new
        block took it with `append_blocks`): together, `allocate_slots(id, computed, 1)` each."""
        self.num_used_slots += num_decodes

    def free(self, request_id: str, num_cached_tokens: int) -> None:
        """Return every block of the request, which held `num_cached_tokens` tokens, to the pool
        (it finished or was preempted)."""
        self.pool.give_back(self.block_tables.pop(request_id, []))
        self.num_used_slots -= num_cached_tokens


class ContiguousKVCache:
    """One max_model_len-slot reservation per admitted request, as before PagedAttention."""
    block_tables = None  # one region per request, no blocks to map

    def __init__(self, num_total_slots: int, max_model_len: int):
        self.num_total_slots = num_total_slots
        self.max_model_len = max_model_len
        self.num_reservations = 0
        self.num_used_slots = 0   # real tokens in the reservations, summed

    @property
    def max_num_reservations(self) -> int:
        return self.num_total_slots // self.max_model_len

    @property
    def num_free_reservations(self) -> int:
        return self.max_num_reservations - self.num_reservations

    @property
    def num_reserved_slots(self) -> int:
        return self.num_reservations * self.max_model_len

    def reserve(self) -> None:
        assert self.num_free_reservations > 0, "caller must check num_free_reservations first"
        self.num_reservations += 1

    def fill(self, num_tokens: int) -> None:
        """Real tokens in the reservations grew by `num_tokens` (summed over requests)."""
        self.num_used_slots += num_tokens

    def free(self, num_cached_tokens: int) -> None:
        """Give back a reservation that held `num_cached_tokens` real tokens."""
        self.num_reservations -= 1
        self.num_used_slots -= num_cached_tokens
