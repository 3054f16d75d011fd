"""Many engines on one virtual clock: data-parallel replicas behind a router.

`--data-parallel-size N` (vLLM's flag) runs N copies of today's engine, each with its own
scheduler and KV cache. Every replica is the engine of main.py, driven one loop turn at a time:

    Replica.next_event_s()   when this engine next has something to do (None: idle)
    Replica.advance(...)     one turn of main.simulate's loop: admit what was routed to it,
                             schedule, price on the clock, apply (or a run of identical decode
                             steps, decode_runs.repeat_identical_decode_steps)

The cluster keeps a heap of the engines' next events and always advances the earliest, so a run
costs N times one engine's work per step plus a log(N) heap operation, not a scan of every engine.
Requests are routed on arrival (router.py); the router sees every replica as it stands then.

Order of events at the same instant, explicit so that a run is the same byte for byte:

    (time_s, kind, replica, seq)     kind: 0 a client's slot freed by a finish (--max-concurrency)
                                           1 an arrival, routed                 (before any step)
                                           2 a prefill done, 3 its KV landing   (disaggregation.py)
                                           4 an engine's step
                                     replica: lower index first; seq: order of pushing

An arrival at the instant a step starts is admitted by that step, as one engine admits arrivals
before it schedules; an engine's step is computed whole when it starts, its finishes noted at its
end. So one replica (`--data-parallel-size 1`) is exactly main.simulate (tested).

Simplified against vLLM: its DP coordinator publishes each engine's counts every 100 ms, and the
front end adds its own picks in between (vllm/v1/engine/core_client.py, DPLBAsyncMPClient); here
the router reads the exact counts. Each replica's step time is its own: replicas do not share a
forward pass (vLLM's dense-model DP engines run independently too; MoE's lock-step waves are
left out).
"""

import heapq
import random
from dataclasses import dataclass, replace
from typing import Optional

import main
from batch import EngineStep
from decode_runs import repeat_identical_decode_steps
from forward_model import synchronous
from metrics import RunRecorder
from router import make_router

FINISH_NOTE, ARRIVAL, STEP = 0, 1, 4  # event kinds, in their order at one instant (2 and 3:
#                                        a prefill done, a KV transfer landing, disaggregation.py)


@dataclass(frozen=True)
class ClusterSpec:
    """How many engines and how requests reach them (commands/cluster_flags.py parses it)."""
    data_parallel_size: int = 1
    router: str = "round-robin"
    pd: Optional[object] = None  # disaggregation.PDSpec, or None: every engine does everything

    def describe(self) -> dict:
        """The engines, for the JSON: how many, the router, and with --pd the two pools and
        the link."""
        if self.pd is None:
            return {"data_parallel_size": self.data_parallel_size, "router": self.router}
        return {"num_prefill_engines": self.pd.num_prefill,
                "num_decode_engines": self.pd.num_decode, "router": self.router,
                "kv_transfer_link": self.pd.link,
                "kv_transfer_bandwidth_gb_s": self.pd.bandwidth_gb_s,
                "kv_transfer_latency_ms": 1000 * self.pd.latency_s}


@dataclass
class ReplicaStats:
    """One replica's own figures, beside the cluster's aggregate (vllm bench serve's)."""
    index: int
    role: str = "both"             # "both", or with --pd "prefill" / "decode"
    num_routed: int = 0            # requests sent to it
    num_finished: int = 0          # requests that ended on it (finished or rejected)
    num_output_tokens: int = 0     # of the requests that finished on it
    num_steps: int = 0
    busy_s: float = 0.0            # summed step durations
    reserved_slot_seconds: float = 0.0
    peak_reserved_slots: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0  # new requests' tokens looked up, as vLLM counts them
    prefix_cache_hits: int = 0

    def count_step(self, step_s: float, reserved_slots: int) -> None:
        self.num_steps += 1
        self.busy_s += step_s
        self.reserved_slot_seconds += reserved_slots * step_s
        self.peak_reserved_slots = max(self.peak_reserved_slots, reserved_slots)

    def summary(self, duration_s: float, num_total_slots: int) -> dict:
        return {
            "replica": self.index,
            "role": self.role,
            "requests": self.num_routed,
            "output_throughput": self.num_output_tokens / duration_s if duration_s > 0 else 0.0,
            "busy_pct": 100.0 * self.busy_s / duration_s if duration_s > 0 else 0.0,
            "mean_kv_usage_pct": _pct(self.reserved_slot_seconds, self.busy_s * num_total_slots),
            "peak_kv_usage_pct": _pct(self.peak_reserved_slots, num_total_slots),
            "prefix_cache_hit_rate": _pct(self.prefix_cache_hits, self.prefix_cache_queries),
            "num_preemptions": self.num_preemptions,
            "num_steps": self.num_steps,
        }


class ClusterRecorder(RunRecorder):
    """The cluster's metrics: `vllm bench serve`'s over every request, as one engine's
    recorder keeps them, plus each replica's own figures (`replicas`) and, with --pd, where a
    request's time went (`disaggregation`). Step-level figures are per replica: KV use is of
    one replica's pool, time-averaged over every replica's steps; mean batch size per step."""

    def __init__(self, spec: ClusterSpec, prefix_caching: bool):
        super().__init__(0, prefix_caching)  # the pool's size is set once the replicas exist
        self.spec = spec
        self.replica_stats: list[ReplicaStats] = []
        self.pd_stats = None  # disaggregation.PDStats, with --pd

    def summary(self) -> dict:
        result = super().summary()
        result["cluster"] = self.spec.describe()
        num_slots = self.counters.num_total_kv_slots
        result["replicas"] = [stats.summary(result["duration"], num_slots)
                              for stats in self.replica_stats]
        if self.pd_stats is not None:
            result["disaggregation"] = self.pd_stats.summary()
        return result


class ReplicaRecorder:
    """What one replica's steps tell the cluster's recorder (the aggregate metrics), teed into
    its own ReplicaStats. `keep_finished=False` (a prefill engine) hands the requests it
    finishes to the cluster instead: their first token is not the client's (disaggregation.py)."""

    def __init__(self, shared: RunRecorder, stats: ReplicaStats, keep_finished: bool = True):
        self.shared = shared
        self.stats = stats
        self.keep_finished = keep_finished
        self.handed_over = []  # prefill engines: requests done here, for the cluster to move

    @property
    def num_steps(self) -> int:
        return self.shared.num_steps

    def on_step(self, step_s, batch, result, reserved_slots, used_slots, *, start_s,
                num_waiting) -> None:
        stats = self.stats
        stats.count_step(step_s, reserved_slots)
        stats.num_preemptions += len(batch.preempted)
        for lookup in batch.prefix_lookups:
            if not lookup.resumed:
                stats.prefix_cache_queries += lookup.num_tokens
                stats.prefix_cache_hits += lookup.num_cached_tokens
        if not self.keep_finished:
            self.handed_over += result.finished
            result = replace(result, finished=[])
        for request in result.finished:
            stats.num_finished += 1
            stats.num_output_tokens += request.num_output_tokens
        self.shared.on_step(step_s, batch, result, reserved_slots, used_slots, start_s=start_s,
                            num_waiting=num_waiting)

    def on_decode_run(self, run, steps, itls_s, *, num_waiting) -> None:
        for step_s, reserved_slots, _ in steps:
            self.stats.count_step(step_s, reserved_slots)
        self.shared.on_decode_run(run, steps, itls_s, num_waiting=num_waiting)

    def on_finished(self, request) -> None:
        """Rejected on arrival by this replica."""
        self.stats.num_finished += 1
        self.shared.on_finished(request)


class Replica:
    """One engine of the cluster: main.simulate's loop, one turn per `advance`."""

    def __init__(self, index: int, scheduler, recorder: ReplicaRecorder, observers,
                 clock, may_run_ahead: bool):
        self.index = index
        self.scheduler = scheduler
        self.recorder = recorder
        self.observers = observers
        self.clock = clock
        self.may_run_ahead = may_run_ahead  # every event that can reach it is known in advance
        self.clock_s = 0.0
        self.inbox = []       # routed to it, not yet admitted (they arrived during its step)
        self.routed = {}      # request id -> why, since its last step (for the step log)
        self.receiving = []   # decode engines: KV on its way (disaggregation.py)
        self.version = 0      # its valid heap entry (older ones are skipped)
        self.idle = True      # its last turn ran no step: it waits for work (or STATIC's timer)

    # -- what the router reads ----------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting) + len(self.inbox)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running) + len(self.receiving)

    # -- the engine's side of the event loop -------------------------------------------------

    def next_event_s(self) -> Optional[float]:
        """Busy: the end of its step, when it goes on. Idle: work handed to it, or STATIC's
        batching window running out; None if it can only wait for the router."""
        if not self.idle:
            return self.clock_s
        wakeup_s = self.scheduler.next_wakeup_s()
        return None if wakeup_s is None else max(self.clock_s, wakeup_s)

    def wake(self, now_s: float) -> None:
        """An idle engine is handed work at `now_s` (as one engine jumps to an arrival)."""
        self.clock_s = max(self.clock_s, now_s)
        self.idle = False

    def advance(self, cluster: "Cluster", now_s: float) -> None:
        """One turn of main.simulate's loop, at `now_s` (its clock, or the event waking it)."""
        self.clock_s = max(self.clock_s, now_s)
        self.idle = True
        self.admit(cluster)
        if not self.scheduler.has_unfinished_requests():
            return
        if self.may_run_ahead:
            # Speed only (decode_runs.py): runs of decodes alone that finish nobody. A run's
            # steps reach the cluster's shared sums of seconds at once, ahead of the other
            # replicas' steps meanwhile; the wider runs (a prompt's chunks, a last step that
            # finishes somebody) would add more steps out of that order, and floating-point
            # sums differ in their last digits with the order they are added in.
            until_s = repeat_identical_decode_steps(
                self.scheduler, self.clock, self.recorder, cluster.arrivals, self.clock_s,
                self.observers, wider=False)
            if until_s != self.clock_s:
                self.clock_s, self.idle = until_s, False
                return
        batch = self.scheduler.schedule(self.clock_s)
        if batch.is_empty:
            self.idle = not batch.preempted  # preempted only: it tries again at once
            return
        self.idle = False
        self.run_step(batch, cluster)

    def admit(self, cluster: "Cluster") -> None:
        """main.admit_arrivals for the requests routed here: a rejected one frees its client's
        slot at once, and the client's next request is routed at once too."""
        while self.inbox:
            arrived, self.inbox = self.inbox, []
            num_rejected = 0
            for request in arrived:
                self.scheduler.add_request(request)
                if request.is_finished:  # rejected on arrival: it can never run
                    self.recorder.on_finished(request)
                    num_rejected += 1
            if num_rejected:
                cluster.arrivals.on_finished(num_rejected, self.clock_s)
                cluster.route_arrivals(self.clock_s)

    def run_step(self, batch, cluster: "Cluster") -> None:
        scheduler, kv_cache = self.scheduler, self.scheduler.kv_cache
        step_s = self.clock.step_time_s(batch)
        reserved, used = kv_cache.num_reserved_slots, kv_cache.num_used_slots
        start_s = self.clock_s  # (as main.SyncSteps has it: not the end less the length)
        self.clock_s += step_s
        result = scheduler.update_from_output(batch, self.clock_s)
        self.recorder.on_step(step_s, batch, result, reserved, used,
                              start_s=start_s, num_waiting=len(scheduler.waiting))
        if result.finished and self.recorder.keep_finished:
            cluster.note_finished(len(result.finished), self.clock_s)
        step = EngineStep(self.recorder.num_steps - 1, start_s, step_s, batch,
                          result, len(scheduler.running), len(scheduler.waiting),
                          scheduler.num_free_blocks, reserved, used, kv_cache.block_tables,
                          replica=self.index, routed=self.routed)
        self.routed = {}
        for observe in self.observers:
            observe(step)


class Cluster:
    """N replicas, one clock, one heap of what happens next."""

    def __init__(self, spec: ClusterSpec, workload, replicas: list[Replica], recorder):
        self.spec = spec
        self.arrivals = workload.arrivals()
        self.replicas = replicas
        self.recorder = recorder
        self.router = make_router(spec.router)
        self.events = []  # heap of (time_s, kind, replica index, seq, payload)
        self.seq = 0
        self.now_s = 0.0

    def push(self, time_s: float, kind: int, index: int, payload=None) -> None:
        heapq.heappush(self.events, (time_s, kind, index, self.seq, payload))
        self.seq += 1

    def schedule_replica(self, replica: Replica) -> None:
        """Put the replica's next step on the heap (its older entry, if any, goes stale)."""
        replica.version += 1
        time_s = replica.next_event_s()
        if time_s is not None:
            self.push(time_s, STEP, replica.index, replica.version)

    def note_finished(self, num_finished: int, end_s: float) -> None:
        """Requests ended at `end_s`: a closed-loop client may send its next one then."""
        self.push(end_s, FINISH_NOTE, -1, num_finished)

    def route_arrivals(self, now_s: float) -> None:
        for request in self.arrivals.pop_arrived(now_s):
            self.recorder.on_arrival(request)
            self.route(request, now_s)

    def route(self, request, now_s: float) -> None:
        candidates = self.entry_replicas()
        choice, why = self.router.choose(request, candidates)
        replica = candidates[choice]
        replica.recorder.stats.num_routed += 1
        replica.routed[request.request_id] = why
        replica.inbox.append(request)
        if replica.idle:
            replica.wake(now_s)
            self.schedule_replica(replica)

    def entry_replicas(self) -> list[Replica]:
        """The engines an arriving request may go to: all of them (prefill ones with --pd)."""
        return self.replicas

    def run(self, progress=None) -> None:
        for replica in self.replicas:
            self.schedule_replica(replica)
        while True:
            next_arrival_s = self.arrivals.next_arrival_s()
            if next_arrival_s is not None and (not self.events or
                                               (max(next_arrival_s, self.now_s), ARRIVAL)
                                               < self.events[0][:2]):
                self.now_s = max(next_arrival_s, self.now_s)
                self.route_arrivals(self.now_s)
                continue
            if not self.events:
                if any(r.next_event_s() is not None for r in self.replicas):
                    raise RuntimeError("cluster stalled: a replica with work has no event")
                return
            time_s, kind, index, _, payload = heapq.heappop(self.events)
            self.now_s = max(self.now_s, time_s)
            if kind == FINISH_NOTE:
                self.arrivals.on_finished(payload, time_s)
            elif kind != STEP:
                self.on_event(kind, index, payload, time_s)
            elif payload == self.replicas[index].version:  # not stale
                replica = self.replicas[index]
                replica.advance(self, time_s)
                self.after_step(replica)
                self.schedule_replica(replica)
                if progress:
                    progress(self.recorder, replica.clock_s)

    def after_step(self, replica: Replica) -> None:
        """What the cluster does after a replica's turn (disaggregation.py: move KV)."""

    def on_event(self, kind: int, index: int, payload, time_s: float) -> None:
        raise RuntimeError(f"event of kind {kind} in a cluster without disaggregation")


def simulate_cluster(spec: ClusterSpec, workload, mode, config, num_gpu_blocks, clock,
                     observers=(), progress=None) -> RunRecorder:
    """main.simulate's contract, over `spec.data_parallel_size` replicas (or P:D pools). Each
    replica runs the synchronous scheduler (Replica.advance is its loop; async scheduling across
    replicas is not modelled), so the CPU's work adds to each step's."""
    config, clock = replace(config, async_scheduling=False), synchronous(clock)
    recorder = ClusterRecorder(spec, mode.caches_prefixes(config))
    replicas = []
    roles = replica_roles(spec)
    for index, role in enumerate(roles):
        replicas.append(make_replica(index, role, workload, mode, config, num_gpu_blocks,
                                     clock, recorder, observers, spec))
    # the pool's size, per replica
    recorder.counters.num_total_kv_slots = replicas[0].scheduler.kv_cache.num_total_slots
    if spec.pd is None:
        cluster = Cluster(spec, workload, replicas, recorder)
    else:
        from disaggregation import DisaggregatedCluster  # built on this file: imported late
        cluster = DisaggregatedCluster(spec, workload, replicas, recorder)
    recorder.replica_stats = [replica.recorder.stats for replica in replicas]
    cluster.run(progress)
    return recorder


def replica_roles(spec: ClusterSpec) -> list[str]:
    if spec.pd is None:
        return ["both"] * spec.data_parallel_size
    return ["prefill"] * spec.pd.num_prefill + ["decode"] * spec.pd.num_decode


def make_replica(index, role, workload, mode, config, num_gpu_blocks, clock, recorder,
                 observers, spec) -> Replica:
    """A replica as main.simulate sets its engine up (each with its own acceptance draws)."""
    seed = workload.params.get('seed', 0)
    rng_name = f"acceptance {seed}" if index == 0 else f"acceptance {seed} replica {index}"
    replica_mode = mode.for_replica() if hasattr(mode, "for_replica") else mode
    replica_observers = [observer.for_replica(index) if hasattr(observer, "for_replica")
                         else observer for observer in observers if observer is not mode]
    if replica_mode is not mode:
        replica_observers.append(replica_mode)  # its own invariant checker
    in_bulk = not any(main.needs_every_request(observe) for observe in replica_observers)
    scheduler = replica_mode.make_scheduler(config, num_gpu_blocks, random.Random(rng_name),
                                            in_bulk)
    stats = ReplicaStats(index, role)
    replica_recorder = ReplicaRecorder(recorder, stats, keep_finished=role != "prefill")
    closed_loop = workload.max_concurrency is not None
    may_run_ahead = spec.pd is None and (spec.data_parallel_size == 1 or not closed_loop)
    replica = Replica(index, scheduler, replica_recorder, replica_observers, clock,
                      may_run_ahead)
    if replica_mode is not mode:
        replica_mode.receiving = replica.receiving  # blocks held while KV lands count as held
    return replica


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
