"""How requests are sent: the arrival process, apart from what the requests are.

    open loop    requests arrive at their own times, whatever the server does. Their gaps are
                 gamma-distributed as in `vllm bench serve --request-rate R --burstiness B`:
                 mean 1/R, and B = 1 is a Poisson process. This is how users on the internet
                 arrive: a slow server does not slow them down, so its queue grows.
    closed loop  at most N requests in flight (`--max-concurrency N`): N clients, each sending
                 its next request when its last one is answered. A slow server slows its own
                 traffic down, so the queue never grows past N. The lesson's "128 concurrent
                 requests" is this loop with N = 128.

The engine loop asks an arrival process three things: when is the next arrival, which requests
have arrived by now, and (for a closed loop) how many requests just finished.
"""

import math
import random
from collections import deque
from typing import Iterator, Optional

from request import Request


class OpenLoopArrivals:
    """Requests arrive at their own times, whatever the engine is doing."""

    def __init__(self, requests: Iterator[Request]):
        self._requests = requests
        self._next: Optional[Request] = next(requests, None)

    def next_arrival_s(self) -> Optional[float]:
        return None if self._next is None else self._next.arrival_s

    def pop_arrived(self, now_s: float) -> list[Request]:
        arrived = []
        while self._next is not None and self._next.arrival_s <= now_s:
            arrived.append(self._next)
            self._next = next(self._requests, None)
        return arrived

    def on_finished(self, num_finished: int, now_s: float) -> None:
        """An open loop does not care when requests finish."""


class ClosedLoopClients:
    """At most `max_concurrency` requests in flight (vllm bench serve --max-concurrency).

    A request planned for time t is sent at max(t, the moment a slot frees); its arrival_s is
    the time it was actually sent, so its TTFT does not include the client's own wait.
    """

    def __init__(self, requests: Iterator[Request], max_concurrency: int):
        self._arrivals = OpenLoopArrivals(requests)
        self._free_slots = max_concurrency
        self._held: deque[Request] = deque()  # planned time passed, waiting for a free slot

    def next_arrival_s(self) -> Optional[float]:
        if self._free_slots == 0:
            return None  # nothing can be sent before a request finishes
        if self._held:
            return self._held[0].arrival_s
        return self._arrivals.next_arrival_s()

    def pop_arrived(self, now_s: float) -> list[Request]:
        self._held.extend(self._arrivals.pop_arrived(now_s))
        sent = []
        while self._held and self._free_slots > 0:
            request = self._held.popleft()
            request.arrival_s = max(request.arrival_s, now_s)
            self._free_slots -= 1
            sent.append(request)
        return sent

    def on_finished(self, num_finished: int, now_s: float) -> None:
        self._free_slots += num_finished


def arrival_times(rng: random.Random, request_rate: float, burstiness: float) -> Iterator[float]:
    """Gamma-distributed gaps with mean 1/request_rate; shape `burstiness` (1.0 = Poisson).

    Lower burstiness means burstier traffic at the same mean rate, as in vllm bench serve: the
    gaps' coefficient of variation is 1/sqrt(burstiness). An infinite rate sends everything at
    time 0.
    """
    now_s = 0.0
    while True:
        yield now_s
        if math.isinf(request_rate):
            continue
        now_s += rng.gammavariate(burstiness, 1.0 / (request_rate * burstiness))
