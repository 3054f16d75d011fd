"""Other draws of a seeded workload: do the table's verdicts hold, or were they one draw's luck?

A synthetic workload is one draw of its random lengths and arrival gaps (`--seed`). Which
continuous mode leads on goodput can flip from one draw to the next, while the lead on P99 ITL
and on output tokens/s seldom does. So `compare` serves the next few seeds too, in CONTINUOUS
and CONTINUOUS+CHUNKED only, and says how many draws each verdict held in, and, where the
goodput verdict splits, how the draws it held in differ in their prompt tokens (the prefill
work the token budget meters out). A verdict is a tie within 1%, as in the goodput line.
"""

import argparse

from commands.workload_flags import workload_from_args
from config import Range
from goodput import add_request_goodput
from modes import MODES

DEFAULT_DRAWS = 5
DRAWS = Range(1, 100, integer=True, why="each draw serves the workload twice more")
SEED_LIMIT = 2**32  # --seed takes 0 to 2^32 - 1; later seeds wrap around
# (JSON key, label, lower is better): the verdicts the default table's takeaways state.
VERDICTS = (("request_goodput", "goodput", False), ("p99_itl_ms", "P99 ITL", True),
            ("output_throughput", "output tok/s", False))
PAIR = ("CONTINUOUS", "CONTINUOUS+CHUNKED")


def wanted(args: argparse.Namespace, workload, results: dict, slos_ms: dict) -> bool:
    """Only for a seeded synthetic workload whose table compares the two continuous modes and
    judges goodput, in the table (the JSON holds each draw's own numbers)."""
    return (args.draws > 1 and args.format == "table" and bool(slos_ms)
            and workload.params.get("seed") is not None and all(name in results for name in PAIR))


def serve_draws(args: argparse.Namespace, engine, results: dict) -> list[tuple[int, dict, dict]]:
    """(seed, CONTINUOUS's metrics, CONTINUOUS+CHUNKED's) for this draw and the next ones."""
    draws = [(args.seed, results[PAIR[0]], results[PAIR[1]])]
    for offset in range(1, args.draws):
        seed = (args.seed + offset) % SEED_LIMIT
        workload = workload_from_args(argparse.Namespace(**{**vars(args), "seed": seed}),
                                      engine.config)
        metrics = []
        for mode in (MODES["continuous"], MODES["chunked"]):
            recorder = engine.serve(workload, mode)
            metrics.append(add_request_goodput(recorder.summary(), recorder, engine.slos_ms))
        draws.append((seed, *metrics))
    return draws


def outcome(whole: dict, chunked: dict, key: str, lower_is_better: bool) -> str:
    """"chunked", "whole" or "tie": which mode leads on `key`."""
    with_chunks, without = chunked[key], whole[key]
    if abs(with_chunks - without) <= 0.01 * abs(without):
        return "tie"
    return "chunked" if (with_chunks < without) == lower_is_better else "whole"


def draws_line(draws: list[tuple[int, dict, dict]]) -> str:
    """How many draws each verdict held in, and what the goodput verdict followed."""
    first, last = draws[0][0], draws[-1][0]
    counts = []
    for key, label, lower_is_better in VERDICTS:
        outcomes = [outcome(whole, chunked, key, lower_is_better) for _, whole, chunked in draws]
        led = {who: outcomes.count(who) for who in ("chunked", "whole", "tie")}
        ties = f", tied in {led['tie']}" if led["tie"] else ""
        counts.append(f"on {label} chunking led in {led['chunked']}, CONTINUOUS in "
                      f"{led['whole']}{ties}")
    line = (f"- Over {len(draws)} draws of this workload (--seed {first} to {last}), "
            + "; ".join(counts) + ".")
    return line + goodput_property(draws)


def goodput_property(draws: list[tuple[int, dict, dict]]) -> str:
    """Where the goodput verdict splits: the mean prompt tokens of the draws chunking led in,
    against those it trailed in."""
    led, trailed = [], []
    for _, whole, chunked in draws:
        verdict = outcome(whole, chunked, "request_goodput", False)
        if verdict != "tie":
            (led if verdict == "chunked" else trailed).append(chunked["total_input_tokens"])
    if not (led and trailed):
        return ""
    return (f" The goodput verdict is the draw's: the draws chunking led in carried "
            f"{sum(led) / len(led):,.0f} prompt tokens on average, those it trailed in "
            f"{sum(trailed) / len(trailed):,.0f}.")
