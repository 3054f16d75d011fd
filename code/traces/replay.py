"""Trace replay: a real service's requests, sent at the times it saw them.

A trace file (trace_formats.py reads the four formats) gives each request a timestamp and its
lengths. Replay keeps the trace's own gaps; a request arrives at

    arrival_s = (its timestamp - the first request's timestamp) x time_scale

so `--trace-time-scale 2` stretches the trace to twice its length (half the request rate) and
0.5 compresses it (twice the rate), as Vidur's `time_scale_factor` and SGLang's
`--mooncake-slowdown-factor` multiply timestamps. Rows must come in time order; equal timestamps
are fine. `--num-prompts N` replays the first N requests; BurstGPT's failed requests are skipped
(and counted), never served.

Request ids: a trace gives every request its own id, or none (servesim then numbers them 0, 1,
2, ... in arrival order, so its own ids can never meet a given one). A repeated id, or an id
missing on some rows only, is refused with both line numbers: two requests under one id would
share one block table.

The file is read once (traces/formats.py); every mode parses that text again, row by row (the
first pass, which checks every row, keeps the ids it has seen).

The first pass of a Mooncake trace also counts which hash ids more than one of the replayed rows
names (`HashIdSharing`). A block past a row's first hash id that no other row names can be found
by no other request, so the prefix cache enters it only when its own request could look for it
again, after a preemption (`TokenContent.shared_length`, kv_cache.py): the same blocks are found,
with fewer cache entries made and dropped. Speed only: no output changes.
"""

import math
from collections import Counter
from typing import Iterator, Optional

from commands.user_input import CompressedText
from config import Range
from request import Request, TokenContent
from traces.formats import (DEFAULT_HASH_BLOCK_SIZE, HASH_ID_SOURCE, TRACE_FORMATS, TraceRow,
                            detect_format, read_trace_text, trace_error, trace_rows)
from traces.shipped import trace_path
from workload import LENGTH, Workload, WorkloadError, check_sending, closed_loop_note


TIME_SCALE = Range(0, math.inf, why="1 keeps the trace's own gaps")
MAX_COUNTED_HASH_IDS = 2**18  # distinct hash ids the first pass counts (some 20 MB; the whole
#                               shipped Mooncake conversation trace names 182,790); past them it
#                               stops, and every block of known tokens is cached as computed


class TraceReplay:
    """One pass over a trace file: its requests in arrival order, on servesim's clock.

    Counts what it read, so that a first pass can check the whole file and report its size
    (requests, span, failed rows skipped) before any mode runs.
    """

    def __init__(self, path: str, text: CompressedText, trace_format: str,
                 num_prompts: Optional[int], time_scale: float,
                 hash_block_size: int = DEFAULT_HASH_BLOCK_SIZE,
                 check_ids: bool = False, shared_ids: Optional[frozenset] = None):
        self.path = path
        self.text = text  # the file, read once, kept compressed
        self.ids = RequestIds(path) if check_ids else None
        self.sharing = HashIdSharing() if check_ids else None  # the first pass counts,
        self.shared_ids = shared_ids                           # the others use what it found
        self.trace_format = trace_format
        self.hash_block_size = hash_block_size
        self.num_prompts = num_prompts  # None: every row
        self.time_scale = time_scale
        self.num_requests = 0
        self.num_failed_skipped = 0
        self.last_arrival_s = 0.0

    def __iter__(self) -> Iterator[Request]:
        first_s: Optional[float] = None
        previous: Optional[TraceRow] = None
        for row in trace_rows(self.path, self.text, self.trace_format,
                              self.hash_block_size, self.shared_ids):
            if previous is not None and row.timestamp_s < previous.timestamp_s:
                raise trace_error(self.path, row.line, f"time goes backwards: "
                                  f"{row.timestamp_text} is earlier than line {previous.line}'s "
                                  f"{previous.timestamp_text}; rows must be in time order")
            previous = row
            if row.failed:
                self.num_failed_skipped += 1
                continue
            if first_s is None:
                first_s = row.timestamp_s
            arrival_s = (row.timestamp_s - first_s) * self.time_scale
            if self.ids is not None:
                self.ids.check(row)
                self.sharing.count(row.content)
            request_id = row.request_id or str(self.num_requests)
            self.num_requests += 1
            self.last_arrival_s = arrival_s
            yield Request(request_id, arrival_s, row.prompt_len, row.output_len,
                          content=row.content)
            if self.num_requests == self.num_prompts:
                return


class HashIdSharing:
    """How many of a replay's rows name each hash id, counted on its first pass, up to
    MAX_COUNTED_HASH_IDS distinct ones."""

    def __init__(self):
        self._num_rows: Optional[Counter] = Counter()  # hash id -> rows naming it; None: too many

    def count(self, content: Optional[TokenContent]) -> None:
        if self._num_rows is None or content is None:
            return
        self._num_rows.update({run.source[1] for run in content.runs
                               if run.source is not None and run.source[0] == HASH_ID_SOURCE})
        if len(self._num_rows) > MAX_COUNTED_HASH_IDS:
            self._num_rows = None

    def shared_ids(self) -> Optional[frozenset]:
        """The hash ids more than one row names; None if they were too many to count."""
        if self._num_rows is None:
            return None
        return frozenset(hash_id for hash_id, num_rows in self._num_rows.items() if num_rows > 1)


class RequestIds:
    """Every id seen so far, with its line: each request its own id, or none has one."""

    def __init__(self, path: str):
        self.path = path
        self.line_of: dict[str, int] = {}    # id -> the line that gave it
        self.first_without: Optional[int] = None  # the first line with no id

    def check(self, row: TraceRow) -> None:
        if row.request_id is None:
            if self.first_without is None:
                self.first_without = row.line
            if self.line_of:
                self._mixed(row.line, "no request id", next(iter(self.line_of.values())), "one")
            return
        if self.first_without is not None:
            self._mixed(row.line, f"request id {row.request_id!r}", self.first_without, "none")
        earlier = self.line_of.setdefault(row.request_id, row.line)
        if earlier != row.line:
            raise trace_error(self.path, row.line, f"request id {row.request_id!r} is already "
                              f"line {earlier}'s; every request needs an id of its own")

    def _mixed(self, line: int, this_row: str, other_line: int, other_row: str) -> None:
        raise trace_error(self.path, line, f"{this_row}, but line {other_line}'s request has "
                          f"{other_row}; give every request an id, or none (servesim then "
                          "numbers them 0, 1, 2, ...)")


def trace_workload(path: str, trace_format: Optional[str] = None,
                   num_prompts: Optional[int] = None, time_scale: float = 1.0,
                   max_concurrency: Optional[int] = None,
                   hash_block_size: int = DEFAULT_HASH_BLOCK_SIZE) -> Workload:
    """Replay a trace file (or a shipped trace by its short name, shipped.py): its first
    `num_prompts` requests (None: all), gaps x `time_scale`.

    Reads the file once here, to check every row the run will use and to count them, so that a
    bad line fails before any mode runs and the report can say how long the trace is.
    """
    check_sending(num_prompts, max_concurrency)
    LENGTH.check("--hash-block-size", hash_block_size, WorkloadError)
    TIME_SCALE.check("--trace-time-scale", time_scale, WorkloadError)
    name, path = path, trace_path(path)  # the report names the trace as the learner did
    text = read_trace_text(path)
    if trace_format is None:
        trace_format = detect_format(path, text)
    elif trace_format not in TRACE_FORMATS:
        raise WorkloadError(f"--trace-format must be one of {', '.join(TRACE_FORMATS)}, "
                            f"got {trace_format!r}")
    scan = TraceReplay(path, text, trace_format, num_prompts, time_scale, hash_block_size,
                       check_ids=True)
    for _ in scan:
        pass  # reading is checking; the counts stay on `scan`
    if scan.num_requests == 0:
        skipped = scan.num_failed_skipped
        failed = f" ({skipped} failed rows skipped)" if skipped else ""
        raise WorkloadError(f"{path}: no requests to replay{failed}")

    shared_ids = scan.sharing.shared_ids()

    def make_requests() -> Iterator[Request]:
        return iter(TraceReplay(path, text, trace_format, num_prompts, time_scale,
                                hash_block_size, shared_ids=shared_ids))

    params = {"name": "trace", "trace": name, "trace_format": trace_format,
              "num_prompts": num_prompts, "trace_time_scale": time_scale,
              "max_concurrency": max_concurrency, "num_requests": scan.num_requests,
              "trace_span_s": scan.last_arrival_s,
              "num_failed_rows_skipped": scan.num_failed_skipped}
    if trace_format == "mooncake":
        params["hash_block_size"] = hash_block_size
    return Workload("trace", describe_replay(name, scan) + closed_loop_note(max_concurrency), params,
                    make_requests, max_concurrency, known_span_s=scan.last_arrival_s)


def describe_replay(name: str, scan: TraceReplay) -> str:
    scale = "" if scan.time_scale == 1 else f" (the trace's gaps x{scan.time_scale:g})"
    failed = (f", {scan.num_failed_skipped} failed requests skipped"
              if scan.num_failed_skipped else "")
    return (f"trace {name} ({scan.trace_format}): {scan.num_requests:,} requests over "
            f"{scan.last_arrival_s:,.1f} s{scale}{failed}")
