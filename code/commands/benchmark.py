"""How fast servesim simulates: fixed workloads, timed with time.perf_counter.

    python3 code/commands/benchmark.py            # every workload (several minutes)
    python3 code/commands/benchmark.py --quick    # the default workload only
    python3 code/commands/benchmark.py vidur-10k synthetic-1m   # the workloads named
    python3 code/commands/benchmark.py --help     # this text (the workloads: CASES, below)

This is where speed is measured, never in a test: machines are shared and noisy, so read the
per-step costs and the ratios, and repeat a run before trusting a difference. Each workload runs
in a fresh process of its own, so that its peak memory (maximum resident set size, MB) is its
own; each is simulated three times there (once for the million requests) and the fastest is
reported (the run the rest of the machine disturbed least). Columns: steps = engine steps; out
tokens = simulated output tokens; wall s = wall time of one simulation and its metrics (the
workload's requests are drawn, or its trace read, as it runs); cpu s = the process's CPU time
for it (what other users of a shared machine disturb less); us/step = wall microseconds per
engine step; out tok/wall s = simulated output tokens per wall second; x floor = output tokens
per CPU second over the CPython floor's (below, also in CPU time); x before = the previous
round's CPU time per engine step over this one's (above 1: faster now; `PREVIOUS`, measured on
this machine; per step, in case a workload takes other step counts since); peak MB = the
process's maximum resident memory.

The floor is the same machine's CPython running the tightest loop that touches every running
request once per step (all work inlined, no calls): what a simulator that visits every request
every step cannot beat. servesim's decode-heavy run is set beside it. The floor is measured in
each workload's process, once before each of its simulations, and its best run taken, as the
simulation's is: a shared machine's speed drifts within minutes, and a ratio of two times
taken seconds apart drifts less.

The workloads run vLLM's synchronous scheduler (--no-async-scheduling), as Vidur's comparison
and the goals were set, except those named "async": vLLM 0.30.0's default and servesim's, which
schedules each batch while the one before runs (async_scheduling.py). Both count their running
decodes as a group (bulk_scheduler.py); async scheduling pays a little more a step, for the
tokens in flight, and its results follow vLLM's async scheduler instead.
"""

import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

CODE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CODE))  # the engine modules, when this file is run as a script

from config import EngineConfig  # noqa: E402
from forward_model import make_clock  # noqa: E402
from gpu_memory import plan_memory  # noqa: E402
from main import knobs, simulate  # noqa: E402
from modes import MODES  # noqa: E402
from workload import mixed_workload, random_workload  # noqa: E402

# Vidur's comparison setup (its 10k-request runs took 43-55 s of wall time for ~27,000 batches).
VIDUR_CONFIG = EngineConfig(model="llama-2-7b", gpu="a100-80gb", max_model_len=4096,
                            max_num_batched_tokens=512, max_num_seqs=256,
                            num_gpu_blocks_override=7424, async_scheduling=False)
DECODE_HEAVY_CONFIG = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm5", async_scheduling=False)
# The previous round's figures (this machine, 2026-12-02, main before the round, under a load
# average below 2), for the "x before" column: CPU seconds of one simulation, engine steps.
PREVIOUS = {"decode-heavy": (0.167, 8_417), "vidur-10k": (0.87, 27_352),
            "synthetic-100k": (9.08, 296_720),
            "synthetic-1m": (102.8, 2_958_858),
            "mooncake-2000-cached": (0.399, 11_741),
            "mooncake-2000-uncached": (0.252, 9_943),
            "decode-heavy-async": (3.34, 8_423),
            "vidur-10k-async": (8.65, 27_377),
            "mooncake-2000-cached-async": (1.39, 11_972)}


def vidur_trace():
    from traces.replay import trace_workload
    return trace_workload("vidur-10k")  # shipped in code/traces/data/


def mooncake_2000():
    from traces.replay import trace_workload
    return trace_workload("mooncake-conversation", num_prompts=2000)  # code/traces/data/


def default_engine(enable_prefix_caching: bool = True,
                   async_scheduling: bool = False) -> EngineConfig:
    return EngineConfig(**{**knobs().engine_defaults(),
                           "enable_prefix_caching": enable_prefix_caching,
                           "async_scheduling": async_scheduling})


def vidur_like(num_prompts: int):
    """Vidur's setup with synthetic lengths near Azure conversation's (prompts ~1,000, outputs
    ~250 tokens) at 5 req/s, below what the setup serves (~5.7 req/s): the queue stays short, so
    the cost per request should not grow with the number of requests."""
    return random_workload(1024, 256, 0.9, num_prompts=num_prompts, request_rate=5.0)


# name -> (what it is, workload factory, config factory, mode keys). Fixed, so runs stay comparable.
CASES = {
    "default": ("default mixed, 80 requests", mixed_workload, default_engine, list(MODES)),
    "decode-heavy": ("llama-3.1-8b/H100: 1,000 x (1,000 + 1,500 tok) at t=0",
                     lambda: random_workload(1000, 1500, 0.0, num_prompts=1000),
                     lambda: DECODE_HEAVY_CONFIG, ["chunked"]),
    "vidur-10k": ("Vidur's 10k Azure-conversation trace", vidur_trace, lambda: VIDUR_CONFIG,
                  ["chunked"]),
    "synthetic-10k": ("Vidur's setup, 10,000 synthetic requests", lambda: vidur_like(10_000),
                      lambda: VIDUR_CONFIG, ["chunked"]),
    "synthetic-100k": ("Vidur's setup, 100,000 synthetic requests", lambda: vidur_like(100_000),
                       lambda: VIDUR_CONFIG, ["chunked"]),
    "synthetic-1m": ("Vidur's setup, 1,000,000 synthetic requests",
                     lambda: vidur_like(1_000_000), lambda: VIDUR_CONFIG, ["chunked"]),
    "mooncake-2000-cached": ("Mooncake conversation, 2,000 requests, prefix caching",
                             mooncake_2000, default_engine, ["chunked"]),
    "mooncake-2000-uncached": ("Mooncake conversation, 2,000 requests, no prefix caching",
                               mooncake_2000, lambda: default_engine(False), ["chunked"]),
    "decode-heavy-async": ("decode-heavy, async scheduling",
                           lambda: random_workload(1000, 1500, 0.0, num_prompts=1000),
                           lambda: replace(DECODE_HEAVY_CONFIG, async_scheduling=True),
                           ["chunked"]),
    "vidur-10k-async": ("Vidur's 10k trace, async scheduling", vidur_trace,
                        lambda: replace(VIDUR_CONFIG, async_scheduling=True), ["chunked"]),
    "mooncake-2000-cached-async": ("Mooncake 2,000, prefix caching, async scheduling",
                                   mooncake_2000, lambda: default_engine(True, True),
                                   ["chunked"]),
}
ONCE = {"synthetic-1m"}  # a minute or more: simulated once, not three times


def measure(case: str, mode_key: str) -> dict:
    """`case` in one mode, simulated three times in this process (once if in ONCE): the fastest
    wall time (the one the rest of the machine disturbed least) and the peak memory."""
    _, make_workload, make_config, _ = CASES[case]
    config = make_config()
    plan, clock = plan_memory(config), make_clock(config)
    wall_times_s, cpu_times_s, floors_tok_s = [], [], []
    for _ in range(1 if case in ONCE else 3):
        floors_tok_s.append(cpython_floor_tok_s())
        workload = make_workload()
        started, started_cpu = time.perf_counter(), time.process_time()
        recorder = simulate(workload, MODES[mode_key], config, plan.num_gpu_blocks, clock)
        tokens = recorder.summary()["total_output_tokens"]  # the metrics are part of the work
        wall_times_s.append(time.perf_counter() - started)
        cpu_times_s.append(time.process_time() - started_cpu)
    return {"steps": recorder.num_steps, "tokens": tokens, "wall_s": min(wall_times_s),
            "cpu_s": min(cpu_times_s), "floor_tok_s": max(floors_tok_s),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def cpython_floor_tok_s(batch: int = 256, num_steps: int = 4000, block_size: int = 16) -> float:
    """Tokens per second of the tightest loop that touches each of `batch` running decodes once
    per step: advance its cached tokens, take a block at a boundary, count its output, check its
    end, add its context to the step's sum for the clock. Everything inlined."""
    computed = [1000 + i for i in range(batch)]
    outputs = [0] * batch
    blocks = [(c + block_size - 1) // block_size for c in computed]
    max_tokens = [10**9] * batch
    started = time.process_time()
    for _ in range(num_steps):
        context = 0
        for i in range(batch):
            c = computed[i]
            if c % block_size == 0:
                blocks[i] += 1
            computed[i] = c + 1
            context += c
            n = outputs[i] + 1
            outputs[i] = n
            if n >= max_tokens[i]:
                max_tokens[i] = 0
    return batch * num_steps / (time.process_time() - started)


def run_in_fresh_process(case: str, mode_key: str) -> dict:
    output = subprocess.run([sys.executable, __file__, "--measure", case, mode_key],
                            capture_output=True, text=True, check=True).stdout
    return json.loads(output)


def times_before(case: str, m: dict) -> str:
    """The previous round's CPU time per step over this one's."""
    if case not in PREVIOUS:
        return "-"
    seconds, steps = PREVIOUS[case]
    return f"{(seconds / steps) / (m['cpu_s'] / m['steps']):.2f}"


def row(label: str, mode_name: str, m: dict, before: str) -> str:
    tok_s, floor_tok_s = m['tokens'] / m['wall_s'], m['floor_tok_s']
    return (f"{label:<56} {mode_name:<19} {m['steps']:>9,} {m['tokens']:>11,} "
            f"{m['wall_s']:>7.2f} {m['cpu_s']:>6.2f} {1e6 * m['wall_s'] / m['steps']:>8.1f} "
            f"{tok_s:>14,.0f} {m['tokens'] / m['cpu_s'] / floor_tok_s:>7.2f} {before:>8} "
            f"{m['peak_mb']:>8.1f}")


def workload_names(argv: list[str]) -> list[str]:
    """The workloads the command line names (all of them if none; --quick: the default one).
    Anything else is refused: one line saying what is valid, exit status 2."""
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    unknown = [word for word in argv if word not in CASES and word != "--quick"]
    if unknown:
        print(f"servesim: error: benchmark.py: unknown workload or flag {unknown[0]!r}: name "
              f"workloads among {', '.join(CASES)}, or give --quick (or nothing: every "
              "workload)", file=sys.stderr)
        sys.exit(2)
    if "--quick" in argv:
        return ["default"]
    return [name for name in argv if name in CASES] or list(CASES)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--measure"]:
        print(json.dumps(measure(argv[1], argv[2])))
        return
    names = workload_names(argv)
    print(f"{'workload':<56} {'mode':<19} {'steps':>9} {'out tokens':>11} {'wall s':>7} "
          f"{'cpu s':>6} {'us/step':>8} {'out tok/wall s':>14} {'x floor':>7} {'x before':>8} {'peak MB':>8}")
    results = {}
    for name in names:
        label, _, _, mode_keys = CASES[name]
        for key in mode_keys:
            results[name, key] = run_in_fresh_process(name, key)
            before = times_before(name, results[name, key]) if key == "chunked" else "-"
            print(row(label, MODES[key].name, results[name, key], before), flush=True)
    if ("decode-heavy", "chunked") in results:
        heavy = results["decode-heavy", "chunked"]
        floor = heavy["floor_tok_s"]
        print(f"\nCPython floor (every running request touched once per step, 256 of them), "
              f"beside decode-heavy: {floor:,.0f} tok/s; decode-heavy servesim: "
              f"{heavy['tokens'] / heavy['cpu_s']:,.0f} tok/s = "
              f"{heavy['tokens'] / heavy['cpu_s'] / floor:.2f}x the floor (both in CPU time)")
    if ("synthetic-10k", "chunked") in results and ("synthetic-100k", "chunked") in results:
        small, large = results["synthetic-10k", "chunked"], results["synthetic-100k", "chunked"]
        print(f"10x the requests: {large['wall_s'] / small['wall_s']:.2f}x the wall time, "
              f"{large['peak_mb'] / small['peak_mb']:.2f}x the peak memory")
    if ("mooncake-2000-cached", "chunked") in results and (
            "mooncake-2000-uncached", "chunked") in results:
        cached = results["mooncake-2000-cached", "chunked"]
        uncached = results["mooncake-2000-uncached", "chunked"]
        print(f"Mooncake 2,000: prefix caching costs {cached['cpu_s'] / uncached['cpu_s']:.2f}x "
              f"the CPU time of caching off ({cached['wall_s'] / uncached['wall_s']:.2f}x the "
              f"wall time)")


if __name__ == "__main__":
    main(sys.argv[1:])
