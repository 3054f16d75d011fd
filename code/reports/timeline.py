"""`--timeline`: the engine's steps as rows of text, one cell per request in the batch.

A learner should *see* what chunked prefill is for. Without it, a long prompt runs whole in one
step, and every request decoding beside it waits for that whole step (CONTINUOUS, 20 requests):

     step    t (s)   step ms tokens  wait | 1      2      3      4      10
      138    3.264      19.0      9     0 | d      d      d      d
      139    3.283     877.7   7729     0 | d      d      d      d      P7720*
      140    4.161     243.2   2400     0 | d      d      d      d      d

With chunked prefill the same prompt is cut to fit a 512-token budget beside the decodes, so
every step stays short and the decodes keep going between chunks (CONTINUOUS+CHUNKED):

      148    3.279      52.3    512     0 | d      d      d      d      P503
      149    3.331      53.1    512     0 | d      d      d      d      P503

LEGEND (printed under the timelines) says what each cell means. Which steps are drawn: the first
N (`--timeline-at start`), a window around the step that ended the worst inter-token gap
(`worst-itl`), or around the first step of one request (`request:ID`). The window is chosen
while the engine runs, keeping only the rows it may draw, so even a long run stays cheap.
"""

from collections import deque
from dataclasses import dataclass
from typing import Optional

from batch import EngineStep
from config import ConfigError

MAX_REQUEST_COLUMNS = 8  # 39 characters of step columns + 8 cells of 7: fits in 100 columns
MAX_ANCHOR_COLUMNS = 6   # of them, at most this many for the anchor step's own requests, so that
#                          prompts elsewhere in the window (what came next) get drawn too
CELL_WIDTH = 7
ANCHORS = ("start", "worst-itl", "request:ID")
LEGEND = [
    "P507 = 507 prompt tokens computed in the step (a chunk, or a whole prompt); * = prompt done,",
    "first token sampled; d = one decode token; . = padding (a finished STATIC member); X =",
    "preempted; blank = not in the step's batch. t (s) = when the step began; step ms = how long",
    "it took: a d that also decoded in the step before waited just that long for its token (ITL).",
    "tokens = tokens computed in the step; wait = requests still waiting after it.",
]
DRAFTS_LEGEND = [
    "d+2/3 = a decode that verified 3 drafts and kept 2 of them: 3 tokens out in one step.",
]


@dataclass(frozen=True)
class TimelineSpec:
    num_steps: int                    # rows to draw
    anchor: str = "start"             # "start", "worst-itl" or "request"
    request_id: Optional[str] = None  # with anchor "request"

    @property
    def num_lead_steps(self) -> int:
        """Rows drawn before the anchor step, so that the reader sees what came before it."""
        return 0 if self.anchor == "start" else self.num_steps // 4


@dataclass
class TimelineRow:
    index: int
    start_s: float
    step_ms: float
    num_tokens: int
    num_waiting: int
    cells: list[tuple[str, str]]  # (request id, cell text), in the batch's order
    max_itl_s: float              # the longest inter-token gap this step ended (0 if none)

    def prefilling_ids(self) -> set[str]:
        return {request_id for request_id, text in self.cells if text.startswith("P")}


def step_row(step: EngineStep) -> TimelineRow:
    """One step as a row. Called right after the step, while each request's state is current."""
    sampled = {id(request) for request in step.result.sampled}
    first_tokens = {id(request) for request in step.result.first_tokens}
    accepted = {id(request): num_accepted for request, _, num_accepted in step.result.verified}
    cells = []
    for scheduled in step.batch.scheduled:
        request = scheduled.request
        if not scheduled.is_decode:
            text = f"P{scheduled.num_new_tokens}" + ("*" if id(request) in first_tokens else "")
        elif scheduled.num_draft_tokens:
            text = f"d+{accepted[id(request)]}/{scheduled.num_draft_tokens}"
        else:
            text = "d" if id(request) in sampled else "."
        cells.append((request.request_id, text))
    cells += [(request.request_id, "X") for request in step.batch.preempted]
    return TimelineRow(step.index, step.start_s, 1000 * step.step_s,
                       step.batch.num_scheduled_tokens, step.num_waiting, cells,
                       max((itl_s for itl_s, _ in step.result.itls), default=0.0))


class TimelineWindow:
    """Observer that keeps the `spec.num_steps` rows to draw, and only those (plus a few before).

    Rows are kept from the anchor step on; `num_lead_steps` recent rows are held back in case
    the next step becomes the anchor. For `worst-itl` a later, worse gap moves the window.
    """
    needs_every_request = True  # a row names every request of the step

    def __init__(self, spec: TimelineSpec):
        self.spec = spec
        self.rows: list[TimelineRow] = []
        self.num_steps_seen = 0
        self._recent: deque[TimelineRow] = deque(maxlen=spec.num_lead_steps)
        self._num_rows_to_add = 0
        self._worst_itl_s = -1.0  # below any gap, so that the first step anchors to begin with
        self.lanes: list[tuple[int, "TimelineWindow"]] = []  # (replica, its window), a cluster's

    def for_replica(self, index: int) -> "TimelineWindow":
        """With several engines (cluster.py): replica `index`'s own window, a lane drawn
        under the others."""
        lane = TimelineWindow(self.spec)
        self.lanes.append((index, lane))
        return lane

    def __call__(self, step: EngineStep) -> None:
        self.num_steps_seen += 1
        if self._is_done():
            return
        row = step_row(step)
        if self._is_anchor(row):
            self.rows = [*self._recent, row]
            self._num_rows_to_add = self.spec.num_steps - len(self.rows)
        elif self._num_rows_to_add > 0:
            self.rows.append(row)
            self._num_rows_to_add -= 1
        self._recent.append(row)
        self._worst_itl_s = max(self._worst_itl_s, row.max_itl_s)

    def _is_done(self) -> bool:
        """A start or request window never moves once it is full."""
        return self.spec.anchor != "worst-itl" and bool(self.rows) and self._num_rows_to_add == 0

    def _is_anchor(self, row: TimelineRow) -> bool:
        """Should the window (re)start at this row?"""
        if self.spec.anchor == "worst-itl":
            return row.max_itl_s > self._worst_itl_s  # the first step with the worst gap wins
        if self.rows:
            return False
        if self.spec.anchor == "request":
            return any(request_id == self.spec.request_id for request_id, _ in row.cells)
        return True  # "start": the first step


def render_timeline(mode_name: str, window: TimelineWindow) -> list[str]:
    """The window as text, at most 100 characters wide (print LEGEND once below the last). A
    cluster's is one lane per replica, one under the other (`step` counts the cluster's steps)."""
    if window.lanes:
        lines = []
        for index, lane in window.lanes:
            lines += ([""] if lines else []) + render_timeline(f"{mode_name}, replica {index}",
                                                              lane)
        return lines
    spec = window.spec
    if not window.rows and spec.anchor != "request":
        return [f"{mode_name}: no engine step to draw (every request was rejected)"]
    if not window.rows:
        raise ConfigError(f"--timeline-at request:{spec.request_id}: {mode_name} never scheduled "
                          "a request with that id (ids are 0, 1, 2, ... for the synthetic "
                          "workload; a trace's id column otherwise)")
    request_ids, num_hidden = _columns(window.rows, _anchor_row(window))
    lines = [_title(mode_name, window), _header(request_ids)]
    for row in window.rows:
        lines.append(_row_text(row, request_ids))
    if num_hidden:
        lines.append(f"({num_hidden} more request(s) ran in these steps and are not drawn; "
                     "their tokens are in `tokens`)")
    return lines


def _columns(rows: list[TimelineRow], anchor: TimelineRow) -> tuple[list[str], int]:
    """Requests to draw, at most MAX_REQUEST_COLUMNS, in order of first appearance. Chosen by
    the story they tell: first up to MAX_ANCHOR_COLUMNS requests of the anchor step (its prompts,
    largest first: what made it slow; then its decodes: who waited; then STATIC's padding
    members), then those prefilling elsewhere in the window, then the earliest others."""
    appearance = list(dict.fromkeys(rid for row in rows for rid, _ in row.cells))
    prefilling = set()
    for row in rows:
        prefilling |= row.prefilling_ids()
    in_anchor = [rid for rid, _ in sorted(anchor.cells, key=_cell_priority)]
    by_priority = list(dict.fromkeys(
        in_anchor[:MAX_ANCHOR_COLUMNS] + [rid for rid in appearance if rid in prefilling]
        + in_anchor + appearance))
    chosen = set(by_priority[:MAX_REQUEST_COLUMNS])
    return [rid for rid in appearance if rid in chosen], len(appearance) - len(chosen)


def _cell_priority(cell: tuple[str, str]) -> tuple[int, int]:
    """Sort key of an anchor step's cell: prompts by size (largest first), then d, ., X."""
    _, text = cell
    if text.startswith("P"):
        return 0, -int(text.strip("P*"))
    return "d.X".index(text) + 1, 0


def _anchor_row(window: "TimelineWindow") -> TimelineRow:
    """The step the window is drawn around: the worst gap's, the request's first, or the first."""
    spec, rows = window.spec, window.rows
    if spec.anchor == "worst-itl":
        return max(rows, key=lambda row: row.max_itl_s)
    if spec.anchor == "request":
        return next(row for row in rows if spec.request_id in dict(row.cells))
    return rows[0]


def _title(mode_name: str, window: TimelineWindow) -> str:
    spec, rows = window.spec, window.rows
    span = f"steps {rows[0].index}-{rows[-1].index} of {window.num_steps_seen}"
    if spec.anchor == "start":
        return f"{mode_name}: {span}, from the start"
    if spec.anchor == "request":
        return f"{mode_name}: {span}, around request {spec.request_id}'s first step"
    worst = _anchor_row(window)
    return (f"{mode_name}: {span}, around the worst ITL "
            f"({1000 * worst.max_itl_s:,.1f} ms, ended by step {worst.index})")


def _header(request_ids: list[str]) -> str:
    cells = "".join(f" {rid[:CELL_WIDTH - 1]:<{CELL_WIDTH - 1}}" for rid in request_ids)
    return f"{'step':>5} {'t (s)':>8} {'step ms':>9} {'tokens':>6} {'wait':>5} |{cells}".rstrip()


def _row_text(row: TimelineRow, request_ids: list[str]) -> str:
    texts = dict(row.cells)
    cells = "".join(f" {texts.get(rid, ''):<{CELL_WIDTH - 1}}" for rid in request_ids)
    return (f"{row.index:>5} {row.start_s:>8.3f} {row.step_ms:>9.1f} {row.num_tokens:>6} "
            f"{row.num_waiting:>5} |{cells}").rstrip()
