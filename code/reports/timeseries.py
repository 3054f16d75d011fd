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

Only runs that ask for charts or the `run` block attach it, so the default path pays nothing.
With several engines (cluster.py) every replica also keeps a series of its own, a lane of the
charts (`lanes`), while the whole series still sees every step (for the peak tok/s).
"""

from collections import Counter
from dataclasses import dataclass, field

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


def peak_output_tokens_per_s(series: StepSeries, start_s: float) -> float:
    """`vllm bench serve`'s "Peak output token throughput": the most tokens in one whole second.

    Seconds are counted from `start_s` (the first completed request's arrival), as whole buckets
    [0 s, 1 s), [1 s, 2 s), ...; a token belongs to the bucket in which its step ended.
    """
    buckets = Counter()
    for end_s, num_tokens in zip(series.end_s, series.num_output_tokens):
        if num_tokens:
            buckets[int(end_s - start_s)] += num_tokens
    return float(max(buckets.values(), default=0))
