"""The latency-throughput curve as text and JSON: one row per (mode, load), and where each mode
saturated (commands/sweep.py serves the points; reports/plots.py draws them)."""

import json
import math
import textwrap
from dataclasses import dataclass, replace

from reports.columns import aligned
from reports.tables import config_json
from workload import json_rate

LOAD_LABELS = {"request_rate": "rate req/s", "max_concurrency": "concurrency",
               "max_num_batched_tokens": "budget tokens"}
LOAD_FLAGS = {"request_rate": "--request-rates", "max_concurrency": "--concurrencies",
              "max_num_batched_tokens": "--max-num-batched-tokens"}
SATURATION_BAND = 0.05  # a mode is saturated where more load adds under 5% to its throughput


@dataclass
class SweepPoint:
    mode_name: str
    load_name: str   # "request_rate" or "max_concurrency": what the sweep varies
    load: float      # its value at this point
    metrics: dict    # RunRecorder.summary() plus request_goodput


# (JSON key, column header, format): the sweep table, left to right after mode and load.
COLUMNS = [
    ("output_throughput", "out tok/s", "{:,.0f}"),
    ("p99_ttft_ms", "P99 TTFT ms", "{:,.0f}"),
    ("p99_itl_ms", "P99 ITL ms", "{:,.1f}"),
    ("request_goodput", "goodput req/s", "{:,.2f}"),
    ("num_preemptions", "preempted", "{:,d}"),
]
# A budget sweep adds what the rule reads: the most new KV blocks one step's budget can fill
# (budget / block size, as the load column is the budget), and the fewest free blocks in the run.
BUDGET_COLUMNS = [("budget_blocks", "blocks/step", "{:,d}"),
                  ("min_free_blocks", "fewest free", "{:,d}")]


def sweep_table(points: list[SweepPoint]) -> list[str]:
    """One row per point, the mode named on its first row only, so each curve reads downwards."""
    load_title = LOAD_LABELS[points[0].load_name]
    is_budget = points[0].load_name == "max_num_batched_tokens"
    columns = COLUMNS + (BUDGET_COLUMNS if is_budget else [])
    headers = ["mode", load_title] + [title for _, title, _ in columns]
    rows = []
    for index, point in enumerate(points):
        first_of_mode = index == 0 or points[index - 1].mode_name != point.mode_name
        rows.append([point.mode_name if first_of_mode else "", load_text(point.load)]
                    + [fmt.format(point.metrics[key]) for key, _, fmt in columns])
    return aligned([headers] + rows, num_text_columns=1)


def sweep_line(points: list[SweepPoint]) -> str:
    """What the sweep varied, for the header (whose workload line shows the first point)."""
    loads = ", ".join(load_text(load) for load in dict.fromkeys(p.load for p in points))
    if points[0].load_name == "max_num_batched_tokens":
        return (f"sweep: the same requests with a token budget (--max-num-batched-tokens) of "
                f"{loads} per step")
    if points[0].load_name == "request_rate":
        varied = f"request rate {loads} req/s"
    else:
        varied = f"max concurrency {loads}"
    return f"sweep: the same requests at {varied} (the workload line shows the first point)"


def load_text(load: float) -> str:
    return "inf" if math.isinf(load) else f"{load:g}"


def saturation_lines(points: list[SweepPoint]) -> list[str]:
    """Per mode: where its throughput stopped growing, or that the sweep never got there.

    The knee is the first load at which throughput is within 5% of the best the mode reached. A
    mode saturates there only if the sweep offered more load after it and throughput stayed flat:
    a curve whose best point is its last may still be climbing, so then the line says which load
    to try next (twice the highest swept). An infinite rate sends everything at once: no load is
    higher, so a best point there is saturation.
    """
    lines = []
    for mode_name in dict.fromkeys(point.mode_name for point in points):
        curve = [point for point in points if point.mode_name == mode_name]
        best = max(point.metrics["output_throughput"] for point in curve)
        knee = next(point for point in curve
                    if point.metrics["output_throughput"] >= (1 - SATURATION_BAND) * best)
        if knee is curve[-1] and not math.isinf(knee.load):  # (inf: all sent at once, the most)
            lines.append(_not_saturated_line(mode_name, curve))
            continue
        lines.append(f"- {mode_name} saturates at about {best:,.0f} output tok/s (within 5% "
                     f"from {load_phrase(knee)} on); there P99 TTFT is "
                     f"{knee.metrics['p99_ttft_ms']:,.0f} ms and P99 ITL "
                     f"{knee.metrics['p99_itl_ms']:,.1f} ms.")
    return lines


def _not_saturated_line(mode_name: str, curve: list[SweepPoint]) -> str:
    last = curve[-1]
    rising = " -> ".join(f"{p.metrics['output_throughput']:,.0f}" for p in curve[-2:])
    flag = LOAD_FLAGS[last.load_name]
    loads = ",".join(load_text(point.load) for point in curve + [replace(last, load=2 * last.load)])
    return (f"- {mode_name} did not saturate within this sweep: its throughput was still rising "
            f"at {load_phrase(last)} ({rising} output tok/s); try a higher load, e.g. "
            f"{flag} {loads}.")


def load_phrase(point: SweepPoint) -> str:
    """"4 req/s" or "concurrency 8": a point's load in words."""
    if point.load_name == "request_rate":
        return f"{load_text(point.load)} req/s"
    if point.load_name == "max_num_batched_tokens":
        return f"a {point.load:,.0f}-token budget"
    return f"concurrency {load_text(point.load)}"


def sweep_json(config, plan, workload_params: dict, slos_ms: dict, points) -> str:
    """The JSON README documents: config, workload, and one result per (mode, point), each naming
    its request_rate and max_concurrency. `workload_params` describe the workload apart from
    the load the sweep varies (which is null there)."""
    config_document = config_json(config, plan)
    workload_json = dict(workload_params)
    varied = config_document if points[0].load_name in config_document else workload_json
    varied[points[0].load_name] = None  # varies: named per result
    workload_json["request_rate"] = json_rate(workload_json.get("request_rate"))
    results = []
    for point in points:
        entry = {"mode": point.mode_name,
                 "request_rate": workload_json.get("request_rate"),
                 "max_concurrency": workload_json.get("max_concurrency")}
        entry[point.load_name] = point.load
        entry["request_rate"] = json_rate(entry["request_rate"])
        results.append({**entry, **point.metrics})
    document = {"config": config_document, "workload": workload_json,
                "sweep": {"load": points[0].load_name, "goodput_slos_ms": slos_ms},
                "results": results}
    return json.dumps(document, indent=2, allow_nan=False)


def budget_rule_lines(points: list[SweepPoint], block_size: int) -> list[str]:
    """Exercise 2's rule, read off a budget sweep, per mode.

    A step's budget bounds the new KV blocks its prompt tokens fill (budget / block size); what it
    can draw on is what the running requests left free. Where the fewest free blocks of a run are
    near zero, the running requests fill the pool whatever the budget: a larger one cannot admit
    more work, only longer steps. Otherwise throughput rises with the budget while the steps, and
    so the ITL of every decode beside a prompt, lengthen: past the knee (the next budget adds
    under 5%), a larger budget buys throughput only by stretching ITL.
    """
    lines = []
    for mode_name in dict.fromkeys(point.mode_name for point in points):
        curve = [point for point in points if point.mode_name == mode_name]
        lines.append(_blocks_line(mode_name, curve, block_size))
        knee = next((here for here, after in zip(curve, curve[1:])
                     if after.metrics["output_throughput"]
                     < (1 + SATURATION_BAND) * here.metrics["output_throughput"]), None)
        if knee is not None:
            after = curve[curve.index(knee) + 1:]
            lines.append(
                f"- {mode_name}: past {load_phrase(knee)} each larger one adds under 5% "
                f"throughput ({knee.metrics['output_throughput']:,.0f} -> "
                f"{after[-1].metrics['output_throughput']:,.0f} tok/s by "
                f"{after[-1].load:,.0f} tokens) and stretches P99 ITL from "
                f"{knee.metrics['p99_itl_ms']:,.0f} to {after[-1].metrics['p99_itl_ms']:,.0f} ms.")
        if "request_goodput" in curve[0].metrics:
            best = max(curve, key=lambda point: point.metrics["request_goodput"])
            lines.append(f"- {mode_name}: the best goodput under the SLOs comes with "
                         f"{load_phrase(best)} ({best.metrics['request_goodput']:.2f} req/s).")
    return [textwrap.fill(line, width=100, subsequent_indent="  ") for line in lines]


def _blocks_line(mode_name: str, curve: list[SweepPoint], block_size: int) -> str:
    """Each budget has its own pool: vLLM's profiling pass, which the memory left for KV blocks
    follows, runs the budget's tokens (gpu_memory.profile_num_tokens)."""
    fewest = [point.metrics["min_free_blocks"] for point in curve]
    pools = [point.metrics["num_gpu_blocks"] for point in curve]
    pool = f"the pool of {_span(pools)} blocks" if len(set(pools)) == 1 else (
        f"the pools of {_span(pools)} blocks (a larger budget's profiling pass leaves fewer)")
    claims = (f"- {mode_name}: a step's budget fills at most {curve[0].metrics['budget_blocks']:,} "
              f"({curve[0].load:,.0f} tokens) to {curve[-1].metrics['budget_blocks']:,} "
              f"({curve[-1].load:,.0f}) new {block_size}-token blocks; at its fullest {pool} had "
              f"{_span(fewest)} free")
    overflowing = [point for point in curve
                   if point.metrics["budget_blocks"] > point.metrics["min_free_blocks"]]
    if not overflowing:
        return claims + ", more than any budget fills: the budget, not the KV cache, limits a step."
    if len(overflowing) == len(curve):
        preempted = [point.metrics["num_preemptions"] for point in curve]
        return (claims + ": the running requests fill the KV cache at every budget "
                f"({_span(preempted)} preemptions), so a larger budget "
                "cannot admit more work, only make each step longer.")
    return (claims + f": from {load_phrase(overflowing[0])} on, a step may want more blocks than "
            "the pool had free at its fullest, and the KV cache, not the budget, limits it.")


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"
