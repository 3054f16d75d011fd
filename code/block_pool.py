"""The physical KV blocks: who holds each, which are free, and which hold a cached prefix.

PagedAttention cuts the KV cache into fixed-size blocks; this pool hands them out and takes them
back, as vLLM 0.30.0's BlockPool does (vllm/v1/core/block_pool.py):

    free queue      blocks nobody holds, in the order they will be handed out. A freed block
                    that is not full goes to the FRONT (reused first); a full one goes to the
                    BACK (kept as long as possible: least recently freed is reused first, an
                    LRU), since vLLM has a cache entry for every full block. (servesim gives one
                    only to blocks someone else could find, see kv_cache.py.) A request frees its
                    blocks tail first, so its last blocks are reused before its first ones: the
                    shared prefix lives longest.
    ref counts      a block hit by a second request is held twice; it is free only when
                    every holder let go
    cache entries   with prefix caching, a full block can be found by the hash of its content
                    (chained over every earlier block, see kv_cache.py). The entry stays when the
                    block is freed and is dropped only when the block is handed out again (lazy
                    eviction); a hit on a free block takes it out of the free queue (`touch`).

Block 0 is vLLM's null block, never handed out, so usable ids are 1 .. num_blocks, as in vLLM.
The free queue is kept in three parts, so that a pool of millions of blocks costs nothing until
used: the freed blocks that are not full (front), the blocks never used yet (in id order), and
the freed full blocks (back, in freeing order). Only the back can be hit, so only it ever loses a
block from its middle: `touch` just forgets the block there (`_in_back`) and notes the copy left
behind (`_left_behind`), which is skipped when it reaches the head. Likewise only the holders
beyond a block's first are counted (`_extra_holders`). So with no block shared, a request's
blocks are freed, and handed out again, a whole run at a time: the front is a list whose end is
the queue's front (a stack: the block freed last is handed out first), the back a list read from
`_head` on (cut off now and then), so that taking many blocks is one slice of a list.
"""

from typing import Iterable, Optional

TRIM_BACK = 4096  # blocks handed out from the back before the list may drop them


class BlockPool:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.num_free_blocks = num_blocks  # nobody holds them, those still holding a cache
        #                                    entry included (as vLLM counts): the free queue's
        #                                    length, kept as take, free and touch move it
        self._front: list[int] = []                        # freed, no cache entry (next: last)
        self._next_unused = 1                              # never used: _next_unused .. num_blocks
        self._back: list[int] = []                         # freed full blocks, oldest first
        self._head = 0                                     # from this index on,
        self._num_in_back = 0                              # how many are truly there,
        self._in_back: set[int] = set()                    # those of them with a cache entry,
        self._left_behind: dict[int, int] = {}             # and the copies touch left behind
        self._extra_holders: dict[int, int] = {}           # shared blocks -> holders beyond 1
        self._entry_of: dict[int, int] = {}                # block -> the hash it is cached under
        self._block_of: dict[int, int] = {}                # hash -> the block found by it (the
        #                                                    first cached under it),
        self._later_blocks_of: dict[int, list[int]] = {}   # and those cached under it after

    @property
    def num_shared_holds(self) -> int:
        """Holds beyond each block's first: what block tables count twice."""
        return sum(self._extra_holders.values())

    def take(self, count: int) -> list[int]:
        """The `count` blocks at the front of the free queue, each now held once; any cache
        entry they still held is dropped (evicted). The caller checked there are enough."""
        self.num_free_blocks -= count
        front, taken = self._front, []
        num_front = min(count, len(front))
        if num_front:
            taken = front[-num_front:]
            del front[-num_front:]
            taken.reverse()  # the queue's front is the list's end
            if num_front == count:
                return taken
        num_unused = min(count - len(taken), self.num_blocks + 1 - self._next_unused)
        if num_unused:
            taken += range(self._next_unused, self._next_unused + num_unused)
            self._next_unused += num_unused
        if len(taken) < count:
            taken += self._take_from_back(count - len(taken))
        return taken

    def _take_from_back(self, count: int) -> list[int]:
        """The `count` least recently freed full blocks, their cache entries dropped."""
        back, head = self._back, self._head
        left_behind = self._left_behind
        taken = back[head:head + count]
        if left_behind and not left_behind.keys().isdisjoint(taken):  # skip the copies of
            taken = []                                                 # blocks that left it
            while len(taken) < count:
                block_id = back[head]
                head += 1
                if block_id in left_behind:
                    self._drop_copy_left_behind(block_id)
                else:
                    taken.append(block_id)
        else:
            head += count
        if head >= TRIM_BACK and 2 * head >= len(back):  # most of the list is behind the head
            del back[:head]
            head = 0
        self._head = head
        self._num_in_back -= count
        in_back = self._in_back
        if in_back:
            evicted = in_back.intersection(taken)  # the taken blocks with a cache entry
            if evicted:
                in_back -= evicted
                self._evict(evicted)
        return taken

    def _drop_copy_left_behind(self, block_id: int) -> None:
        copies = self._left_behind[block_id]
        if copies == 1:
            del self._left_behind[block_id]
        else:
            self._left_behind[block_id] = copies - 1

    def free(self, block_ids: list[int], num_cached_blocks: int,
             num_with_entries: Optional[int] = None) -> None:
        """A request lets go of its blocks (`block_ids` in its block table's order, of which the
        first `num_cached_blocks` are full, and of those the first `num_with_entries` hold a
        cache entry, the others none; None: any may). Freed tail first; a block still held by
        another request stays where it is."""
        full, rest = block_ids[:num_cached_blocks], block_ids[num_cached_blocks:]
        shared = self._extra_holders and self._extra_holders.keys() & block_ids
        if shared:  # another request still holds these: they stay where they are
            extra_holders = self._extra_holders
            for block_id in shared:  # one holder fewer beyond the first
                extra = extra_holders[block_id]
                if extra == 1:
                    del extra_holders[block_id]
                else:
                    extra_holders[block_id] = extra - 1
            full = [block_id for block_id in full if block_id not in shared]
            rest = [block_id for block_id in rest if block_id not in shared]
            num_with_entries = None  # (the first ones are not the same ones now)
        self.num_free_blocks += len(rest) + len(full)
        self._front.extend(rest)  # the tail block frontmost
        self._back.extend(reversed(full))
        self._note_in_back(full, num_with_entries)

    def _note_in_back(self, block_ids: list[int], num_with_entries: Optional[int]) -> None:
        """Full blocks joined the back of the queue; those with a cache entry (the first
        `num_with_entries`; None: each is looked up) may be hit there (`touch`), so the set
        remembers them (speed: only they are ever looked for)."""
        self._num_in_back += len(block_ids)
        if num_with_entries is None:
            self._in_back.update(filter(self._entry_of.__contains__, block_ids))
        elif num_with_entries:
            self._in_back.update(block_ids[:num_with_entries])

    def free_block_ids(self) -> list[int]:
        """Every free block, in the order the queue hands them out (a check's full pass)."""
        unused = range(self._next_unused, self.num_blocks + 1)
        left_behind = dict(self._left_behind)
        back = []
        for block_id in self._back[self._head:]:
            if left_behind.get(block_id):
                left_behind[block_id] -= 1
            else:
                back.append(block_id)
        return [*reversed(self._front), *unused, *back]

    # -- prefix caching ----------------------------------------------------------------------

    def cache_full_blocks(self, block_ids: list[int], block_hashes: list[int]) -> None:
        """Held, full blocks can now be found by their contents' hashes (vLLM's
        cache_full_blocks). A second block with the same content gets an entry too (vLLM does
        not de-duplicate): the first stays the one found."""
        self._entry_of.update(zip(block_ids, block_hashes))
        block_of = self._block_of
        if block_of.keys().isdisjoint(block_hashes):  # most often: contents nobody cached
            num_cached = len(block_of)
            block_of.update(zip(block_hashes, block_ids))
            if len(block_of) == num_cached + len(block_ids):
                return
            for block_hash in block_hashes:  # a content twice among them: once more, in order
                block_of.pop(block_hash, None)
        for block_id, block_hash in zip(block_ids, block_hashes):
            if block_hash in block_of:
                self._later_blocks_of.setdefault(block_hash, []).append(block_id)
            else:
                block_of[block_hash] = block_id

    def cache_entry(self, block_id: int) -> Optional[int]:
        """The hash the block can be found by, or None."""
        return self._entry_of.get(block_id)

    def find(self, block_hash: int) -> Optional[int]:
        """A block holding this content, held or free, or None."""
        return self._block_of.get(block_hash)

    def find_prefix(self, block_hashes: Iterable[int]) -> list[int]:
        """The blocks holding the leading contents of `block_hashes`, up to the first content
        not cached."""
        blocks, block_of = [], self._block_of
        for block_hash in block_hashes:
            block_id = block_of.get(block_hash)
            if block_id is None:
                break
            blocks.append(block_id)
        return blocks

    def touch(self, block_ids: list[int]) -> None:
        """Prefix hits: each block is held once more; a free one leaves the free queue."""
        in_back, left_behind, extra_holders = self._in_back, self._left_behind, self._extra_holders
        for block_id in block_ids:
            if block_id in in_back:  # free: it leaves the queue, now held once
                in_back.remove(block_id)
                self._num_in_back -= 1
                self.num_free_blocks -= 1
                left_behind[block_id] = left_behind.get(block_id, 0) + 1
            else:
                extra_holders[block_id] = extra_holders.get(block_id, 0) + 1

    def is_free(self, block_id: int) -> bool:
        """Of a block holding a cache entry: nobody holds it (it waits at the back)."""
        return block_id in self._in_back

    def num_free_among(self, block_ids: list[int]) -> int:
        """Of blocks holding a cache entry: how many nobody holds."""
        return len(self._in_back.intersection(block_ids))

    def _evict(self, block_ids: set[int]) -> None:
        """The blocks, each with a cache entry, are handed out again: their contents can no
        longer be found here (in whatever order they go)."""
        entry_of, block_of, later_blocks_of = self._entry_of, self._block_of, self._later_blocks_of
        block_hashes = list(map(entry_of.pop, block_ids))
        if not later_blocks_of or later_blocks_of.keys().isdisjoint(block_hashes):
            list(map(block_of.pop, block_hashes))  # each the only block of its content
            return
        for block_id, block_hash in zip(block_ids, block_hashes):
            if block_hash in later_blocks_of:
                self._evict_one_of_several(block_id, block_hash)
            else:
                del block_of[block_hash]

    def _evict_one_of_several(self, block_id: int, block_hash: int) -> None:
        """Several blocks are cached under the hash: the next one is found once the first goes."""
        later = self._later_blocks_of[block_hash]
        if self._block_of[block_hash] == block_id:
            self._block_of[block_hash] = later.pop(0)
        else:
            later.remove(block_id)
        if not later:
            del self._later_blocks_of[block_hash]
