"""`run --block-table ID`: one request's block table, drawn as the engine fills it.

PagedAttention's whole idea in one picture: a request's KV lives in fixed-size blocks scattered
over the pool, and its block table maps each logical block (tokens 0-15, 16-31, ...) to the
physical block that holds it. The drawing follows one request through the run:

     step    t (s)  request 3                          its block table (logical 0, 1, ...)
        4    0.061  P40*: takes 3 blocks                [5, 6, 7]
                    others took: 4 -> [8, 9]
        9    0.170  decode: token 48 needs block 3      [5, 6, 7, 12]
       20    0.402  finished: returns 4 blocks          []

then the first request that is handed one of those physical blocks again: the pool's free list
is one queue, so a block returned by one request is taken by another, and no request owns a
place in memory. `others took` shows the blocks other requests took in the same step: the
tables interleave in the pool. (vLLM's free queue hands out the block freed longest ago first;
so does servesim's, so reuse shows once the pool has cycled: a small pool shows it soonest.)

The observer reads the KV cache's block tables after every step (`EngineStep.block_tables`) and
the requests the step scheduled, so it needs every request named: the engine gives it the plain
rules, one request at a time.
"""

import textwrap
from dataclasses import dataclass, field
from typing import Optional

from batch import EngineStep
from config import ConfigError

MAX_TABLE_ENTRIES = 12  # longer tables show runs of consecutive ids as first..last


@dataclass
class BlockEvent:
    """What happened to a watched request's table in one step."""
    step: int
    start_s: float
    what: str                  # "P40*: takes 3 blocks", "decode: ...", "finished: ..."
    table: list[int]           # its block table after the step
    others_took: dict[str, list[int]] = field(default_factory=dict)  # other requests' new blocks
    reused: list[int] = field(default_factory=list)  # of its new blocks, the first request's
    returned: list[int] = field(default_factory=list)  # the blocks it gave back to the pool


class BlockTableWatch:
    """Observer: the block table of request `request_id`, and of the first request that reuses
    one of its physical blocks once it returned them."""
    needs_every_request = True  # it reads the blocks each scheduled request took

    def __init__(self, request_id: str, block_size: int):
        self.request_id = request_id
        self.block_size = block_size
        self.events: list[BlockEvent] = []
        self.reuser_id: Optional[str] = None       # the second request, once found
        self.reuser_events: list[BlockEvent] = []
        self.num_pool_blocks: Optional[int] = None
        self._held: dict[str, int] = {}            # request id -> blocks it held last step
        self._tables: dict[str, list[int]] = {}    # watched requests' tables, kept as returned
        self._returned: set[int] = set()           # physical ids the first request gave back

    def __call__(self, step: EngineStep) -> None:
        assert step.block_tables is not None, "a paged mode's steps only (commands/run.py checks)"
        taken = self._blocks_taken(step)
        for request in step.batch.preempted:
            self._give_back(step, request.request_id, "preempted")
        for request in step.result.finished:
            self._give_back(step, request.request_id, "finished")
        if self.reuser_id is None and self._returned:
            self.reuser_id = next((rid for rid, blocks in taken.items()
                                   if rid != self.request_id and self._returned & set(blocks)),
                                  None)
        for watched in (self.request_id, self.reuser_id):
            if watched in taken:
                self._took(step, watched, taken)

    def _blocks_taken(self, step: EngineStep) -> dict[str, list[int]]:
        """The physical blocks each scheduled request took in this step, in scheduling order."""
        taken = {}
        for scheduled in step.batch.scheduled:
            request_id = scheduled.request.request_id
            table = step.block_tables.get(request_id, [])
            num_held = self._held.get(request_id, 0)
            if len(table) > num_held:
                taken[request_id] = table[num_held:]
            self._held[request_id] = len(table)
        return taken

    def _took(self, step: EngineStep, request_id: str, taken: dict[str, list[int]]) -> None:
        table = list(step.block_tables.get(request_id, []))
        self._tables[request_id] = table
        scheduled = next(s for s in step.batch.scheduled if s.request.request_id == request_id)
        new_blocks = taken[request_id]
        if scheduled.is_decode:
            what = (f"decode: token {scheduled.num_context_tokens} needs block "
                    f"{len(table) - 1}")
        else:
            first = "*" if any(r is scheduled.request for r in step.result.first_tokens) else ""
            what = f"P{scheduled.num_new_tokens}{first}: takes {_blocks(len(new_blocks))}"
        others = {rid: blocks for rid, blocks in taken.items() if rid != request_id}
        event = BlockEvent(step.index, step.start_s, what, table, others)
        if request_id == self.reuser_id:
            event.reused = [block for block in new_blocks if block in self._returned]
            self.reuser_events.append(event)
        else:
            self.events.append(event)

    def _give_back(self, step: EngineStep, request_id: str, why: str) -> None:
        self._held.pop(request_id, None)
        if request_id not in (self.request_id, self.reuser_id) or request_id not in self._tables:
            return
        table = self._tables.pop(request_id)
        event = BlockEvent(step.index, step.start_s, f"{why}: returns {_blocks(len(table))}",
                           [])
        event.returned = table
        if request_id == self.request_id:
            self._returned |= set(table)
            self.events.append(event)
        else:
            self.reuser_events.append(event)


def _blocks(count: int) -> str:
    return f"{count} block" if count == 1 else f"{count} blocks"


def table_text(table: list[int]) -> str:
    """[5, 6, 7, 12] -> "[5, 6, 7, 12]"; a long table keeps its runs short: "[5..40, 52]"."""
    if len(table) <= MAX_TABLE_ENTRIES:
        return "[" + ", ".join(map(str, table)) + "]"
    runs, start = [], 0
    for index in range(1, len(table) + 1):
        if index == len(table) or table[index] != table[index - 1] + 1:
            first, last = table[start], table[index - 1]
            runs.append(str(first) if first == last else f"{first}..{last}")
            start = index
    return "[" + ", ".join(runs) + "]"


def render_block_table(mode_name: str, watch: BlockTableWatch, num_pool_blocks: int) -> list[str]:
    """The watched request's table step by step, then the reusing request's, at most 100 wide."""
    if not watch.events:
        raise ConfigError(f"--block-table {watch.request_id}: {mode_name} never scheduled a "
                          "request with that id (ids are 0, 1, 2, ... for the synthetic "
                          "workload; a trace's id column otherwise)")
    lines = [f"{mode_name}: request {watch.request_id}'s block table, logical block -> "
             f"physical block id", f"({watch.block_size} tokens a block, {num_pool_blocks:,} "
             "blocks in the pool; P46* = 46 prompt tokens, * = first token sampled)"]
    lines += _event_lines(watch.request_id, watch.events)
    if watch.reuser_id is None:
        lines += textwrap.wrap(f"No request was handed one of request {watch.request_id}'s "
                               "blocks again before the run ended: the free list had not cycled "
                               "(a smaller pool, --num-gpu-blocks-override, shows reuse sooner).",
                               width=100)
        return lines
    lines += ["", f"request {watch.reuser_id} takes physical blocks request {watch.request_id} "
                  "returned (marked *):"]
    return lines + _event_lines(watch.reuser_id, watch.reuser_events)


def _event_lines(request_id: str, events: list[BlockEvent]) -> list[str]:
    lines = [f"{'step':>5} {'t (s)':>8}  {'request ' + request_id:<34} block table after the step"]
    for event in events:
        reused = set(event.reused)
        table = table_text(event.table) if not reused else "[" + ", ".join(
            f"{block}*" if block in reused else str(block) for block in event.table) + "]"
        lines.append(f"{event.step:>5} {event.start_s:>8.3f}  {event.what:<34} {table}".rstrip())
        if event.returned:
            lines.append(f"{'':>16}back to the free list: {table_text(event.returned)}")
        if event.others_took:
            took = "; ".join(f"{rid} -> {table_text(blocks)}"
                             for rid, blocks in event.others_took.items())
            lines.append(f"{'':>16}others took: {took}")
    return lines
