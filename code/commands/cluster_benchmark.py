"""How N replicas cost against one: wall time per engine step as the cluster grows.

    python3 code/commands/cluster_benchmark.py

The same steady load per replica (random 256-token prompts, 64-token outputs, 4 req/s per
replica; 200 requests per replica), served by 1, 2, 4, 8 and 16 replicas through the cluster's
loop (cluster.py; one replica through it too, so that the loop itself is what is measured), and by
main.simulate for one replica. Columns: steps = engine steps of all replicas; wall s = the
fastest of three runs; us/step = wall microseconds per step; ratio = us/step against one
replica's through the same loop. A heap of next events costs log(N) per step, so the ratio should
stay near 1 (N replicas cost N times one replica's steps), not grow with N as a scan would.
Speed is measured here, never in a test (machines are shared and noisy).
"""

import contextlib
import io
import json
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import main  # noqa: E402
from cluster import ClusterSpec, simulate_cluster  # noqa: E402
from commands import cli  # noqa: E402

SIZES = (1, 2, 4, 8, 16)
PER_REPLICA = ["--dataset-name", "random", "--random-input-len", "256",
               "--random-output-len", "64", "--seed", "1", "--format", "json"]


def timed(simulate, num_replicas: int) -> tuple[int, float]:
    argv = ["run", *PER_REPLICA, "--num-prompts", str(200 * num_replicas),
            "--request-rate", str(4 * num_replicas)]
    best = float("inf")
    for _ in range(3):
        out = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out):
            cli.main(argv, simulate, main.knobs())
        best = min(best, time.perf_counter() - start)
    return json.loads(out.getvalue())["results"][0]["num_steps"], best


def main_table() -> list[str]:
    lines = [f"{'engines':>22} {'steps':>7} {'wall s':>7} {'us/step':>8} {'ratio':>6}"]
    steps, wall = timed(main.simulate, 1)
    lines.append(f"{'main.simulate, 1':>22} {steps:>7} {wall:>7.3f} {1e6 * wall / steps:>8.1f}")
    base = None
    for size in SIZES:
        steps, wall = timed(partial(simulate_cluster, ClusterSpec(size)), size)
        per_step = 1e6 * wall / steps
        base = base or per_step
        lines.append(f"{'cluster, ' + str(size):>22} {steps:>7} {wall:>7.3f} {per_step:>8.1f} "
                     f"{per_step / base:>6.2f}")
    return lines


if __name__ == "__main__":
    print("\n".join(main_table()))
