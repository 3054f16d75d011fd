"""What the engine looked like after every step: the raw material of the charts.

`StepSeries` is an observer for `main.simulate`: called once per engine step, it keeps one sample
per step, all on the virtual clock:

    end_s              when the step ended (s)
    num_seqs           sequences the step computed: RUNNING requests in its batch (STATIC:
                       every member, finished ones padding too)
    num_waiting        requests WAITING after the step (preempted ones included)
    kv_blocks          KV blocks held while the step ran. NAIVE and STATIC reserve contiguous
                       slots, not blocks: their reserved slots / block_size, the same memory
                       counted in blocks, so every mode's line shares one axis
    num_output_tokens  tokens the step sampled (first tokens and decodes, accepted drafts too)

and every inter-token gap (ITL) the step ended, once per distinct value with its count: a decode
step in which 64 requests waited 31 ms each is one entry (t, 0.031 s, 64), as in metrics.py.

Only runs that draw charts attach it (one sample a step is what a chart of every step needs);
`run` without a chart keeps `OutputTokensPerSecond`, one number per second of the virtual clock.
With several engines (cluster.py) every replica also keeps a series of its own, a lane of the
charts (`lanes`), while the whole series still sees every step.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from batch import EngineStep


@dataclass(frozen=True)
class ItlPoint:
    end_s: float   # when the step that ended these gaps finished
    itl_s: float   # the gap before a token, seconds
    count: int     # how many tokens of this step followed a gap of exactly itl_s


@dataclass
class StepSeries:
    mode_name: str
    block_size: int
    end_s: list[float] = field(default_factory=list)
    num_seqs: list[int] = field(default_factory=list)
    num_waiting: list[int] = field(default_factory=list)
    kv_blocks: list[float] = field(default_factory=list)
    num_output_tokens: list[int] = field(default_factory=list)
    itl_points: list[ItlPoint] = field(default_factory=list)
    is_paged: bool = True  # False for the contiguous reservations of NAIVE and STATIC
    lanes: list["StepSeries"] = field(default_factory=list)  # one per replica of a cluster
    needs_every_request = False  # sums only: the engine may count decodes in bulk

    def for_replica(self, index: int) -> "ReplicaSeries":
        """Replica `index`'s observer: its own lane, and this whole series too."""
        lane = StepSeries(self.mode_name, self.block_size, is_paged=self.is_paged)
        self.lanes.append(lane)
        return ReplicaSeries(self, lane)

    def __call__(self, step: EngineStep) -> None:
        end_s = step.start_s + step.step_s
        self.end_s.append(end_s)
        self.num_seqs.append(step.batch.num_seqs)
        self.num_waiting.append(step.num_waiting)
        self.kv_blocks.append(step.kv_reserved_slots / self.block_size)
        self.num_output_tokens.append(step.result.num_output_tokens)
        counts = Counter()
        for itl_s, count in step.result.itls:
            counts[itl_s] += count
        for itl_s, count in sorted(counts.items()):
            self.itl_points.append(ItlPoint(end_s, itl_s, count))


class ReplicaSeries:
    """One replica's steps, into its lane and into the cluster's whole series."""
    needs_every_request = False

    def __init__(self, whole: StepSeries, lane: StepSeries):
        self.whole = whole
        self.lane = lane

    def __call__(self, step: EngineStep) -> None:
        self.whole(step)
        self.lane(step)


@dataclass
class OutputTokensPerSecond:
    """Output tokens in each whole second of the virtual clock, counted from the first served
    request's arrival: all that `vllm bench serve`'s peak output token throughput needs, one
    number a second however many steps the run takes (what `run` keeps when it draws no chart).
    """
    start_s: Optional[float] = None
    buckets: Counter = field(default_factory=Counter)  # whole seconds from start_s -> tokens
    needs_every_request = False  # sums only

    def __call__(self, step: EngineStep) -> None:
        if self.start_s is None:  # the first step admits the head of WAITING, the earliest
            self.start_s = min(s.request.arrival_s for s in step.batch.scheduled)  # to complete
        num_tokens = step.result.num_output_tokens
        if num_tokens:
            self.buckets[int(step.start_s + step.step_s - self.start_s)] += num_tokens

    def count_run_steps(self, steps: list[tuple[float, float]], num_tokens: int) -> None:
        """Steps of a run of identical ones (decode_runs.py), each (start, seconds), each giving
        `num_tokens` output tokens: counted as a call for each would count them."""
        if num_tokens:
            for start_s, step_s in steps:
                self.buckets[int(start_s + step_s - self.start_s)] += num_tokens

    def peak(self, start_s: float) -> float:
        """`vllm bench serve`'s "Peak output token throughput": the most tokens in one whole
        second. Seconds are counted from `start_s` (the first completed request's arrival, the
        start this observer took), as whole buckets [0 s, 1 s), [1 s, 2 s), ...; a token belongs
        to the bucket in which its step ended."""
        assert start_s == self.start_s, (start_s, self.start_s)
        return float(max(self.buckets.values(), default=0))
