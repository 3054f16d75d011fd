"""`--step-log FILE`: one JSON line per engine step, to replay what the scheduler decided.

    {"mode": "CONTINUOUS+CHUNKED", "step": 0, "time_s": 0.0, "step_ms": 52.101,
     "scheduled": {"a": 512}, "preempted": [], "finished": [], "num_free_blocks": 11379}

`time_s` is the virtual clock when the step began (rounded to the microsecond, `step_ms` too);
`scheduled` lists request ids with the tokens each computed, in the scheduler's order (running
first, then newly admitted; with speculative decoding, the drafts each decode verified
included); `num_free_blocks` is counted after the step (null for the contiguous allocator of NAIVE
and STATIC, which has no blocks; blocks free but still holding a cached prefix count as free, as
in vLLM); with prefix caching, `cached_tokens` names every request admitted in the step with the
prompt tokens it found in the cache (zeros included); a step that verified drafts adds `drafts`:
request id -> [drafts verified, drafts accepted]. With several engines (`--data-parallel-size`,
`--pd`, cluster.py) every line adds `replica` (the engine that ran the step, 0 ..) and, for the
requests routed to it since its last step, `routed`: request id -> why the router chose it
(router.py); `step` then counts the cluster's steps, in the order they began. With `--pd` a
prefill engine's `finished` names the requests whose prompt it finished (each goes on to a decode
engine, whose `routed` says so, and finishes there). The file appears only when the whole run
succeeded: it is written beside the target and renamed at the end (output_files.py), so a failed
run leaves nothing half-written.
"""

import json
from typing import Optional

from batch import EngineStep


class StepLog:
    """Writes one JSON line per engine step to `file` (output_files.PendingFiles owns the file)."""

    def __init__(self, file):
        self._file = file

    def observer(self, mode_name: str, prefix_caching: bool) -> "StepLogLines":
        return StepLogLines(self._file, mode_name, prefix_caching)


class StepLogLines:
    """Observer: one mode's steps, as lines of the step log."""
    needs_every_request = True  # it names every request scheduled in every step

    def __init__(self, file, mode_name: str, prefix_caching: bool,
                 replica: Optional[int] = None):
        self._file = file
        self.mode_name = mode_name
        self.prefix_caching = prefix_caching
        self.replica = replica  # one engine of several (cluster.py); None: the only one

    def for_replica(self, index: int) -> "StepLogLines":
        """The same file, for the steps of replica `index` of a cluster."""
        return StepLogLines(self._file, self.mode_name, self.prefix_caching, index)

    def __call__(self, step: EngineStep) -> None:
        line = {
            "mode": self.mode_name,
            "step": step.index,
            "time_s": round(step.start_s, 6),
            "step_ms": round(step.step_s * 1000, 3),
            "scheduled": {s.request.request_id: s.num_new_tokens for s in step.batch.scheduled},
            "preempted": [r.request_id for r in step.batch.preempted],
            "finished": [r.request_id for r in step.result.finished],
            "num_free_blocks": step.num_free_blocks,
        }
        if self.prefix_caching:
            line["cached_tokens"] = {lookup.request_id: lookup.num_cached_tokens
                                     for lookup in step.batch.prefix_lookups}
        if step.result.verified:
            line["drafts"] = {request.request_id: [num_drafts, num_accepted]
                              for request, num_drafts, num_accepted in step.result.verified}
        if self.replica is not None:
            line["replica"] = self.replica
            line["routed"] = step.routed or {}
        self._file.write(json.dumps(line, allow_nan=False) + "\n")
