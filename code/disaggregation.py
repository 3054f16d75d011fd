"""Prefill/decode disaggregation: `--pd P:D` runs P prefill engines and D decode engines.

A long prompt's prefill stalls every decode batched beside it (the lesson's story; chunked
prefill shortens the stall). Disaggregation (DistServe, OSDI 2024; Splitwise, ISCA 2024; vLLM's
`--kv-transfer-config` connectors such as NixlConnector) removes it: prompts and decodes run on
different GPUs, and the prompt's KV cache moves between them.

    arrival --router--> prefill engine: computes the prompt and samples one token (max_tokens 1,
                        as vLLM's disaggregated proxy sends it), then frees its blocks
            ---------> decode engine (least-loaded, as vLLM's DP balancer scores it): takes blocks
                        for the prompt first; a full pool makes the transfer wait, in order
            ---------> the KV moves: prompt tokens x KV bytes per token (this GPU's shard) /
                        link bandwidth + the link's latency
            ---------> the decode engine computes the last prompt token again (vLLM 0.30.0's
                        scheduler, `_update_waiting_for_remote_kv`: "on a full prompt hit, we need
                        to re-compute the last token"), which samples the client's first token,
                        then decodes

So TTFT = prefill-side time (queue + prompt) + transfer (wait for blocks + wire) + one decode
step. The client's first token is the decode engine's, as in vLLM, where the proxy streams the
decode instance's answer. Simplified: the prefill engine frees its blocks when it finishes (vLLM
holds them until the transfer is read); a decode engine's own prefix cache is not looked up
before the transfer; a landed request runs from the decode engine's next step (vLLM puts it back
in WAITING, admitted in its turn).
"""

from dataclasses import dataclass, field
from typing import Optional

from cluster import Cluster, Replica
from request import Request
from router import LeastLoaded

# One GPU's link, per direction. Bandwidths from the makers' published figures:
LINKS = {
    # NVLink 4 (H100 SXM): 900 GB/s total, 450 GB/s each way (NVIDIA H100 datasheet, 2023).
    "nvlink": (450.0, 2e-6),
    # InfiniBand NDR: 400 Gb/s per port = 50 GB/s (NVIDIA ConnectX-7 / Quantum-2 datasheets).
    "infiniband": (50.0, 5e-6),
    # PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b coding = 63 GB/s each way (PCI-SIG, 2019).
    "pcie": (63.0, 5e-6),
}
# Latencies (seconds, the second figure): a one-sided message's order of magnitude on that link
# (a few microseconds, the makers' port-to-port figures plus a hop); they matter only for tiny
# prompts, whose bytes take microseconds as well.
DEFAULT_LINK = "infiniband"  # prefill and decode on different nodes, as llm-d deploys them
PREFILL_DONE, KV_LANDS = 2, 3  # between cluster.ARRIVAL (1) and cluster.STEP (4) at one instant


@dataclass(frozen=True)
class PDSpec:
    num_prefill: int
    num_decode: int
    bandwidth_gb_s: float       # one GPU's link, GB/s (1e9 bytes), each way
    latency_s: float
    link: str                   # its name, or "custom"
    kv_bytes_per_token: int     # one token's keys and values on one GPU (its TP shard)

    def transfer_s(self, num_tokens: int) -> float:
        """The wire time of `num_tokens` tokens' KV: each GPU of the tensor-parallel group
        sends its own shard over its own link, at the same time."""
        return num_tokens * self.kv_bytes_per_token / (self.bandwidth_gb_s * 1e9) + self.latency_s


@dataclass
class Transfer:
    request: Request            # the client's request, which the decode engine runs
    prefill_done_s: float
    reserved_s: Optional[float] = None
    landed_s: Optional[float] = None


@dataclass
class PDStats:
    """Where a disaggregated request's time went, summed over requests (seconds)."""
    transfers: dict = field(default_factory=dict)  # request id -> Transfer
    num_kv_bytes: int = 0

    def summary(self) -> dict:
        done = [t for t in self.transfers.values() if t.landed_s is not None]
        count = len(done) or 1
        prefill = sum(t.prefill_done_s - t.request.arrival_s for t in done)
        wait = sum(t.reserved_s - t.prefill_done_s for t in done)
        wire = sum(t.landed_s - t.reserved_s for t in done)
        decode = sum(t.request.last_token_s - t.landed_s for t in done)
        return {
            "mean_prefill_side_ms": 1000 * prefill / count,
            "mean_kv_transfer_wait_ms": 1000 * wait / count,
            "mean_kv_transfer_ms": 1000 * wire / count,
            "mean_decode_side_ms": 1000 * decode / count,
            "kv_transferred_gb": self.num_kv_bytes / 1e9,
        }


class DisaggregatedCluster(Cluster):
    """Prefill engines first (0 .. P-1), then decode engines; arrivals go to prefill ones."""

    def __init__(self, spec, workload, replicas: list[Replica], recorder):
        super().__init__(spec, workload, replicas, recorder)
        self.pd = spec.pd
        self.prefill = replicas[:spec.pd.num_prefill]
        self.decode = replicas[spec.pd.num_prefill:]
        self.queued = {replica.index: [] for replica in self.decode}  # transfers waiting
        self.stats = PDStats()
        self.originals = {}  # prefill part's request id -> the client's request
        self.decode_chooser = LeastLoaded()
        recorder.pd_stats = self.stats

    def entry_replicas(self) -> list[Replica]:
        return self.prefill

    def route(self, request: Request, now_s: float) -> None:
        """The prefill engine gets a copy asking for one token; the client's request waits."""
        part = Request(request.request_id, request.arrival_s, request.prompt_len, max_tokens=1,
                       content=request.content)
        part.arrival_index = request.arrival_index
        self.originals[request.request_id] = request
        super().route(part, now_s)

    def after_step(self, replica: Replica) -> None:
        for part in replica.recorder.handed_over:  # prefill done at the step's end
            self.push(replica.clock_s, PREFILL_DONE, replica.index, part)
        replica.recorder.handed_over = []
        if replica in self.decode:
            self.start_queued(replica, replica.clock_s)

    def on_event(self, kind: int, index: int, payload, time_s: float) -> None:
        if kind == PREFILL_DONE:
            self.on_prefill_done(payload, time_s)
        else:
            self.on_kv_landed(index, payload, time_s)

    def on_prefill_done(self, part: Request, now_s: float) -> None:
        request = self.originals.pop(part.request_id)
        transfer = Transfer(request, now_s)
        self.stats.transfers[request.request_id] = transfer
        index, why = self.decode_chooser.choose(request, [DecodeLoad(r, self.queued[r.index])
                                                         for r in self.decode])
        decode = self.decode[index]
        decode.recorder.stats.num_routed += 1
        decode.routed[request.request_id] = f"decode after prefill, {why}"
        self.queued[decode.index].append(transfer)
        self.start_queued(decode, now_s)

    def start_queued(self, decode: Replica, now_s: float) -> None:
        """Reserve blocks for waiting transfers, in order, while the pool holds them."""
        queue = self.queued[decode.index]
        while queue and reserve_blocks(decode, queue[0].request):
            transfer = queue.pop(0)
            transfer.reserved_s = now_s
            decode.receiving.append(transfer.request)
            num_tokens = transfer.request.num_computed_tokens
            self.stats.num_kv_bytes += num_tokens * self.pd.kv_bytes_per_token
            self.push(now_s + self.pd.transfer_s(num_tokens), KV_LANDS, decode.index, transfer)

    def on_kv_landed(self, index: int, transfer: Transfer, now_s: float) -> None:
        decode = self.replicas[index]
        transfer.landed_s = now_s
        decode.receiving.remove(transfer.request)
        decode.scheduler.receive_remote_kv(transfer.request)
        if decode.idle:
            decode.wake(now_s)
            self.schedule_replica(decode)


class DecodeLoad:
    """A decode engine as the least-loaded chooser sees it: transfers queued count as waiting,
    transfers on the wire as running."""

    def __init__(self, replica: Replica, queued: list):
        self.num_waiting = replica.num_waiting + len(queued)
        self.num_running = replica.num_running
        self.scheduler = replica.scheduler  # its KV use


def reserve_blocks(decode: Replica, request: Request) -> bool:
    """Blocks for the whole prompt on the decode engine, or False if its pool cannot hold them
    now. The KV of all but the last prompt token arrives (that one is computed again)."""
    kv_cache = decode.scheduler.kv_cache
    if not kv_cache.can_fit(request.request_id, request.prompt_len):
        return False
    num_arriving = request.prompt_len - 1
    kv_cache.allocate_slots(request, 0, num_arriving)
    request.num_computed_tokens = num_arriving
    return True

