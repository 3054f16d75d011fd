"""How fast servesim simulates: fixed workloads, wall time per engine step and per output token.

    python3 code/commands/benchmark.py            # about half a minute
    python3 code/commands/benchmark.py --quick    # the default workload only

This is where speed is measured, never in a test: machines are shared and noisy, so read the
per-step and per-token costs and the ratios between modes, and repeat a run before trusting a
difference. Each workload runs once per mode after one warm-up run of the default workload.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # code/, for the engine modules

from config import EngineConfig  # noqa: E402
from forward_model import make_clock  # noqa: E402
from gpu_memory import plan_memory  # noqa: E402
from main import knobs, simulate  # noqa: E402
from modes import MODES  # noqa: E402
from workload import mixed_workload, random_workload  # noqa: E402

# (label, workload factory, modes): fixed forever, so that runs stay comparable.
CASES = [
    ("default mixed, 80 requests", mixed_workload, list(MODES)),
    ("random 1000/500 x 2000, all at t=0", lambda: random_workload(1000, 500, 0.0, num_prompts=2000),
     ["continuous", "chunked"]),
]


def measure(label: str, make_workload, mode_keys: list[str]) -> list[str]:
    config = EngineConfig(**knobs().engine_defaults())  # the knob block of code/main.py
    plan, clock = plan_memory(config), make_clock(config)
    rows = []
    for key in mode_keys:
        started = time.perf_counter()
        recorder = simulate(make_workload(), MODES[key], config, plan.num_gpu_blocks, clock)
        wall_s = time.perf_counter() - started
        summary = recorder.summary()
        tokens = summary["total_output_tokens"]
        rows.append(f"{label:<36} {MODES[key].name:<19} {recorder.num_steps:>8,} "
                    f"{tokens:>10,} {wall_s:>7.2f} {1e6 * wall_s / recorder.num_steps:>9.1f} "
                    f"{tokens / wall_s:>14,.0f}")
    return rows


def main(argv: list[str]) -> None:
    cases = CASES[:1] if "--quick" in argv else CASES
    config = EngineConfig(**knobs().engine_defaults())
    simulate(mixed_workload(), MODES["chunked"], config, plan_memory(config).num_gpu_blocks,
             make_clock(config))  # warm-up
    print(f"{'workload':<36} {'mode':<19} {'steps':>8} {'out tokens':>10} {'wall s':>7} "
          f"{'us/step':>9} {'out tok/wall s':>14}")
    for label, make_workload, mode_keys in cases:
        for row in measure(label, make_workload, mode_keys):
            print(row)


if __name__ == "__main__":
    main(sys.argv[1:])
