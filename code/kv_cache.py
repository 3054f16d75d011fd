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

Prefix caching (vLLM V1's automatic prefix caching, on by default) is where the blocks pay twice.
A full block is known by a hash of its tokens chained over every earlier block, so two requests
whose prompts start alike have equal hashes for their common full blocks. A request admitted
with nothing computed (new, or back from preemption) looks its blocks up, front to back, and
stops at the first miss: the blocks it finds are shared (block_pool.py counts references) and
not computed again. At most (num_tokens - 1) // block_size blocks hit, because the model must
compute at least the last token to sample the next. A block is registered the moment it is
scheduled full, so a request admitted later in the same step already finds it. Tokens that
nobody can share (a prompt without known tokens, outputs nobody knows in advance) get hashes of
their own: only the request itself finds them, after a preemption. vLLM hashes with SHA-256;
servesim with Python's hash of integer tuples, the same in every run.
"""

import itertools
from typing import Collection

from block_pool import BlockPool
from request import NamedBlocks, Request

OWN_CONTENT = 2  # in a hash key: tokens only one request has (the request's own content id)


def num_blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold `num_tokens` tokens: ceil(num_tokens / block_size)."""
    return -(-num_tokens // block_size)


class PagedKVCache:
    """Per-request block tables over one BlockPool (vLLM's KVCacheManager)."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 drop_last_hit: bool = False):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.drop_last_hit = drop_last_hit  # EAGLE: the head needs the last hit block recomputed
        self.defers_unshared_blocks = False  # speed only (bulk_scheduler.py, where no view reads
        #   the cache's entries): a block nobody else can find (past TokenContent.shared_length)
        #   is entered only when its own request could look for it again, once preempted
        self.pool = BlockPool(num_blocks)
        self.block_tables: dict[str, list[int]] = {}
        self.num_empty_slots = 0  # in held blocks, slots holding no token (the requests' tails)
        self._num_registered: dict[str, int] = {}  # request id -> its leading blocks cached so far
        self._num_hashed_tokens: dict[str, int] = {}  # request id -> tokens vLLM hashed, when
        #                     its latest allocation held drafts (accepted ones past it wait)
        self._num_own_contents = 0  # content ids handed out to requests whose tokens are their own

    @property
    def num_total_slots(self) -> int:
        return self.pool.num_blocks * self.block_size

    @property
    def num_reserved_slots(self) -> int:
        return (self.pool.num_blocks - self.pool.num_free_blocks) * self.block_size

    @property
    def num_used_slots(self) -> int:
        """Real tokens held: a block two requests share counts once."""
        return self.num_reserved_slots - self.num_empty_slots

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def num_new_blocks_needed(self, request_id: str, num_total_tokens: int) -> int:
        """Blocks to add so that the request can hold `num_total_tokens` tokens."""
        num_held = len(self.block_tables.get(request_id, ()))
        return max(0, num_blocks_for(num_total_tokens, self.block_size) - num_held)

    def can_fit(self, request_id: str, num_total_tokens: int, cached_blocks=()) -> bool:
        """Could the request hold `num_total_tokens` tokens, given the cached blocks it found?
        A cached block that is free still leaves the free queue when taken: it counts."""
        num_needed = self.num_new_blocks_needed(request_id, num_total_tokens) - len(cached_blocks)
        num_needed += self.pool.num_free_among(cached_blocks)
        return num_needed <= self.num_free_blocks

    def allocate_slots(self, request: Request, num_computed: int, num_new_tokens: int,
                       num_lookahead_tokens: int = 0) -> bool:
        """Make room for `num_new_tokens` after `num_computed`, and for `num_lookahead_tokens`
        more that a speculative proposer writes ahead; False (nothing taken) if full."""
        request_id = request.request_id
        num_new_blocks = self.num_new_blocks_needed(
            request_id, num_computed + num_new_tokens + num_lookahead_tokens)
        if num_new_blocks > self.pool.num_free_blocks:
            return False
        if num_new_blocks:  # the tokens cross into blocks the request does not hold yet
            self.block_tables.setdefault(request_id, []).extend(self.pool.take(num_new_blocks))
        self.num_empty_slots += num_new_blocks * self.block_size - num_new_tokens
        self.note_scheduled(request, num_computed + num_new_tokens)
        return True

    def note_scheduled(self, request: Request, num_scheduled: int) -> None:
        """Prefix caching's part of an allocation for the request's first `num_scheduled`
        tokens: its full blocks of known tokens get their cache entries (and vLLM's hashing
        waits for tokens not known yet). A run of chunks (decode_runs.py) takes its blocks
        and then notes this once: entries for held blocks change no block the pool hands out."""
        if self.enable_prefix_caching:
            num_known = min(num_scheduled, request.num_tokens)
            self._register_shared_blocks(request, num_known)
            self._note_hashed_tokens(request.request_id, num_scheduled, num_known)

    def cache_known_tokens(self, request: Request, num_known: int) -> None:
        """Async scheduling: the request's output arrived, so its first `num_known` tokens are
        known now; vLLM hashes their full blocks at once (AsyncScheduler's
        `_update_request_with_output`), not at the next allocation."""
        if not self.enable_prefix_caching:
            return
        self._register_shared_blocks(request, num_known)
        request_id = request.request_id
        num_hashed = self._num_hashed_tokens.get(request_id)
        if num_hashed is not None:
            self._note_hashed_tokens(request_id, request.num_computed_tokens,
                                     max(num_hashed, num_known))

    def _note_hashed_tokens(self, request_id: str, num_scheduled: int, num_known: int) -> None:
        """vLLM hashes a request's full blocks at allocation, up to the tokens known then: its
        drafts (and, with async scheduling, the tokens steps in flight sample) are not known
        yet. The blocks the accepted ones fill wait for the next allocation; if the request is
        preempted or finishes first, they are freed unhashed."""
        if num_scheduled > num_known:
            self._num_hashed_tokens[request_id] = num_known
        else:
            self._num_hashed_tokens.pop(request_id, None)

    def append_blocks(self, request_ids: Collection[str]) -> None:
        """One more block for each request, whose last block is full (decodes crossing into a
        new block), in that order; the caller has checked that the pool holds them. Their
        tokens are counted in with `fill_slots`."""
        if not request_ids:
            return  # (most steps: no decode fills its last block)
        block_tables = self.block_tables
        for request_id, block_id in zip(request_ids, self.pool.take(len(request_ids))):
            block_tables[request_id].append(block_id)
        self.num_empty_slots += len(request_ids) * self.block_size

    def append_run_blocks(self, steps: list[tuple[Collection[str], int]], prompt_id: str) -> None:
        """The blocks of steps in a row (a run of them, decode_runs.py), in the order the rules
        take them: in each step (crossing decodes' ids, the prompt's new blocks), one for each
        decode crossing into a new block, then the prompt's chunk's. One take from the pool:
        nothing is freed in between, so it hands out the same blocks as a take a step."""
        taken = self.pool.take(sum(len(crossing) + num_blocks for crossing, num_blocks in steps))
        block_tables, blocks = self.block_tables, iter(taken)
        prompt_table = block_tables[prompt_id]
        for crossing, num_prompt_blocks in steps:
            for request_id, block_id in zip(crossing, blocks):  # (zip takes one block each)
                block_tables[request_id].append(block_id)
            prompt_table.extend(itertools.islice(blocks, num_prompt_blocks))
        self.num_empty_slots += len(taken) * self.block_size

    def fill_slots(self, num_tokens: int) -> None:
        """`num_tokens` tokens are cached in slots their requests hold (blocks taken with
        `append_blocks` where they crossed into a new one): `num_decodes` decodes' next tokens
        are together what `allocate_slots(r, computed, 1)` each would count."""
        self.num_empty_slots -= num_tokens

    def drop_rejected_drafts(self, num_rejected: int) -> None:
        """The target rejected drafts it had cached: their slots hold no token any more. The
        blocks stay with the request; its next tokens overwrite those slots (as in vLLM)."""
        self.num_empty_slots += num_rejected

    def free(self, request: Request, preempted: bool = False) -> None:
        """Return every block of the request to the pool (it finished or was preempted). Its full
        blocks keep their cache entries until handed out again; a preempted request's own ones
        are registered now, so that it can find them when it comes back. Full blocks vLLM had
        not hashed yet (filled by accepted drafts since the latest allocation) have no entry:
        they go to the front of the free queue, as blocks that were never full do."""
        block_ids = self.block_tables.pop(request.request_id, [])
        self.num_empty_slots -= len(block_ids) * self.block_size - request.num_computed_tokens
        num_hashed = self._num_hashed_tokens.pop(request.request_id, request.num_computed_tokens)
        num_hashed = min(num_hashed, request.num_computed_tokens)
        num_full_blocks = num_hashed // self.block_size  # with a hash: they go to the back
        num_registered = self._num_registered.pop(request.request_id, 0)
        num_with_entries = num_registered  # its leading blocks, found cached or registered
        #                                    (a block taken from the pool lost its entry then)
        if not self.enable_prefix_caching:
            num_full_blocks = 0  # no block holds a cache entry
        elif preempted:
            hashes = self.block_hashes(request, num_full_blocks)
            self.pool.cache_full_blocks(block_ids[num_registered:num_full_blocks],
                                        hashes[num_registered:num_full_blocks])
            num_with_entries = num_full_blocks
        self.pool.free(block_ids, num_full_blocks, num_with_entries)

    # -- prefix caching ----------------------------------------------------------------------

    def find_cached_prefix(self, request: Request) -> list[int]:
        """The blocks of the request's longest cached prefix, at most (num_tokens - 1) //
        block_size of them: the model computes at least the last token to sample the next."""
        if not self.enable_prefix_caching:
            return []
        if request.content is None and not request.num_preemptions:
            return []  # nothing of its own was ever registered, and it shares nothing
        num_findable = (request.num_tokens - 1) // self.block_size
        hashes = self.block_hashes(request, num_findable)
        blocks = self.pool.find_prefix(itertools.islice(hashes, num_findable))
        if self.drop_last_hit and blocks:  # its hidden states feed the EAGLE head's drafts
            blocks.pop()
        return blocks

    def admit_cached(self, request: Request, cached_blocks: list[int]) -> None:
        """The request takes the cached blocks it found as the first of its block table."""
        if cached_blocks:
            self.pool.touch(cached_blocks)
            self.block_tables[request.request_id] = list(cached_blocks)
            self._num_registered[request.request_id] = len(cached_blocks)

    def register_completed_block(self, request: Request, num_cached_tokens: int) -> None:
        """A decode in bulk fills its last block this step (it will cache `num_cached_tokens`):
        what allocate_slots registers for a decode scheduled on its own."""
        if request.content is not None:
            self._register_shared_blocks(request, num_cached_tokens)

    def _register_shared_blocks(self, request: Request, num_cached_tokens: int) -> None:
        """Give a cache entry to each of the request's full blocks of known tokens (those other
        requests may share) that has none yet. Blocks of its own tokens wait for `free`, which
        caches them if it is preempted: only then could somebody, itself, look for them; so do
        blocks past its `shared_length` if `defers_unshared_blocks`."""
        content = request.content
        if content is None:
            return
        known = content.num_shared_tokens if self.defers_unshared_blocks else content.known_length
        num_full = min(num_cached_tokens, known) // self.block_size
        start = self._num_registered.get(request.request_id, 0)
        if start >= num_full:
            return
        block_ids = self.block_tables[request.request_id]
        hashes = self.block_hashes(request, num_full)
        self.pool.cache_full_blocks(block_ids[start:num_full], hashes[start:num_full])
        self._num_registered[request.request_id] = num_full

    def block_hashes(self, request: Request, num_blocks: int) -> list[int]:
        """The request's block hashes, at least its first `num_blocks` (each computed once): a
        full block's hash is chained over every block before it, so equal hashes mean equal
        tokens from the very first one."""
        hashes = request.block_hashes
        if len(hashes) >= num_blocks:
            return hashes
        if request.content is not None:
            for key in request.content.block_keys(len(hashes), num_blocks, self.block_size):
                if isinstance(key, NamedBlocks):
                    hashes += self._named_block_hashes(key, hashes)
                else:
                    hashes.append(hash((hashes[-1] if hashes else 0, key)))
        if len(hashes) < num_blocks:  # tokens of its own: they, and every later block, are
            #                           unique to it; numbered on from one hash of its own
            own_hash = hash((OWN_CONTENT, self._own_content_id(request)))
            hashes += range(own_hash + len(hashes), own_hash + num_blocks)
        return hashes

    @staticmethod
    def _named_block_hashes(blocks: NamedBlocks, hashes: list[int]) -> range:
        """The hashes of blocks wholly inside one run of named tokens (a Mooncake hash id's 32
        blocks): one hash for the run, chained over every block before it, and its blocks
        numbered on from it. Equal hashes still mean equal tokens from the first: the run's
        hash names its source, where in it the run's first whole block starts, and everything
        before that block; a block's number counts the blocks since then. (One hash per hash
        id instead of one a block: prefix caching's cost is the pool's work, not hashing.)"""
        before = hashes[blocks.run_block - 1] if blocks.run_block else 0
        run_hash = hash((before, blocks.source, blocks.run_offset))
        return range(run_hash + blocks.first - blocks.run_block,
                     run_hash + blocks.stop - blocks.run_block)

    def _own_content_id(self, request: Request) -> int:
        if request.own_content_id is None:
            self._num_own_contents += 1
            request.own_content_id = self._num_own_contents
        return request.own_content_id


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
