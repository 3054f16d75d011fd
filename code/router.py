"""The router: which replica an arriving request goes to (`--router`).

    round-robin    replica 0, 1, ..., N-1, 0, ...: blind to load and to caches
    least-loaded   the lowest load, as vLLM 0.30.0's data-parallel load balancer scores its
                   engines (vllm/v1/engine/core_client.py, DPLBAsyncMPClient.
                   get_core_engine_for_request): waiting + running, plus, while requests wait,
                   waiting x 6 x (KV use - 0.5) when over half the KV cache is in use (a queue
                   on a KV-bound engine drains slowly); the scan starts one engine further each
                   request, so ties go round in turn. (vLLM takes the larger of the
                   coordinator's snapshot and its own in-flight count; here both are exact,
                   and equal. Older vLLM scored 4 x waiting + running.)
    prefix-aware   llm-d's scorers, weighted as llm-d's "intelligent inference scheduling"
                   well-lit path configures its scheduler (llm-d/llm-d, guides/inference-
                   scheduling/scheduler/inference-scheduling.values.yaml: queue-scorer 2,
                   kv-cache-utilization-scorer 2, prefix-cache-scorer 3): each scorer gives every
                   replica a score in [0, 1], the weighted sum picks (max-score-picker)

llm-d's three scorers, as this router computes them from each replica's real state:

    prefix cache     blocks of the prompt found in the replica's prefix cache (its real block
                     hashes, kv_cache.py) / blocks of the prompt looked up
    queue            (most waiting - its waiting) / (most - fewest), over the replicas; 1 for all
                     when they wait alike
    KV utilization   1 - its reserved KV blocks / its pool

llm-d's "precise" prefix scorer reads the engines' KV events; its default one guesses from the
prompts it routed. Reading the caches directly is the precise one. Ties, which llm-d's picker
breaks at random, go to the lowest index here, so a run is the same byte for byte.
Each choice comes back with a short reason, which the step log records (`routed`).
"""

from typing import Optional

LLM_D_WEIGHTS = {"prefix": 3, "queue": 2, "kv": 2}  # llm-d's inference-scheduling guide
ROUTERS = ("round-robin", "least-loaded", "prefix-aware")


class RoundRobin:
    def __init__(self):
        self.next_index = 0

    def choose(self, request, replicas) -> tuple[int, str]:
        index = self.next_index % len(replicas)
        self.next_index += 1
        return index, "round-robin"


class LeastLoaded:
    def __init__(self):
        self.start_index = 0  # where the next scan begins: vLLM's eng_start_index

    def choose(self, request, replicas) -> tuple[int, str]:
        index, best = 0, None
        for offset in range(len(replicas)):
            candidate = (self.start_index + offset) % len(replicas)
            score = load_score(replicas[candidate])
            if best is None or score < best:  # strictly lower: the scan's first wins a tie
                index, best = candidate, score
        self.start_index = (self.start_index + 1) % len(replicas)
        replica = replicas[index]
        return index, (f"least-loaded: {replica.num_waiting} waiting + {replica.num_running} "
                       f"running, KV {100 * kv_usage(replica):.0f}% -> {best:.2f}")


class PrefixAware:
    @staticmethod
    def choose(request, replicas) -> tuple[int, str]:
        prefix = [prefix_score(replica, request) for replica in replicas]
        queue = queue_scores(replicas)
        kv = [1.0 - kv_usage(replica) for replica in replicas]
        totals = [LLM_D_WEIGHTS["prefix"] * p + LLM_D_WEIGHTS["queue"] * q
                  + LLM_D_WEIGHTS["kv"] * k for p, q, k in zip(prefix, queue, kv)]
        index = totals.index(max(totals))
        return index, (f"prefix-aware: 3 x prefix {prefix[index]:.2f} + 2 x queue "
                       f"{queue[index]:.2f} + 2 x kv {kv[index]:.2f} = {totals[index]:.2f}")


def make_router(name: str):
    return {"round-robin": RoundRobin, "least-loaded": LeastLoaded,
            "prefix-aware": PrefixAware}[name]()


def load_score(replica) -> float:
    """vLLM 0.30.0's engine load: waiting + running, waiting penalized over half-full KV."""
    score = float(replica.num_waiting + replica.num_running)
    if replica.num_waiting:
        score += replica.num_waiting * 6.0 * max(0.0, kv_usage(replica) - 0.5)
    return score


def queue_scores(replicas) -> list[float]:
    waiting = [replica.num_waiting for replica in replicas]
    most, fewest = max(waiting), min(waiting)
    if most == fewest:
        return [1.0] * len(replicas)
    return [(most - w) / (most - fewest) for w in waiting]


def kv_usage(replica) -> float:
    """Share of the replica's KV blocks held (NAIVE and STATIC: of its slots reserved)."""
    kv_cache = replica.scheduler.kv_cache
    return kv_cache.num_reserved_slots / kv_cache.num_total_slots


def prefix_score(replica, request) -> float:
    """Share of the prompt's lookable blocks the replica holds in its prefix cache."""
    num_blocks = num_lookup_blocks(replica, request)
    if not num_blocks:
        return 0.0
    return cached_prefix_blocks(replica, request, num_blocks) / num_blocks


def num_lookup_blocks(replica, request) -> Optional[int]:
    """Full blocks of known prompt tokens the engine would look up: at most (prompt - 1) //
    block_size (kv_cache.find_cached_prefix), and only blocks whose tokens are known to be
    shared (a block of tokens the request alone has is found nowhere)."""
    kv_cache = replica.scheduler.kv_cache
    if not getattr(kv_cache, "enable_prefix_caching", False) or request.content is None:
        return 0
    block_size = kv_cache.block_size
    return min((request.prompt_len - 1) // block_size,
               request.content.known_length // block_size)


def cached_prefix_blocks(replica, request, num_blocks: int) -> int:
    """The longest run of the request's first blocks whose hashes the replica's pool holds."""
    kv_cache = replica.scheduler.kv_cache
    hashes = kv_cache.block_hashes(request, num_blocks)
    count = 0
    while count < num_blocks and kv_cache.pool.find(hashes[count]) is not None:
        count += 1
    return count
