"""The latency-throughput curve as text and JSON: one row per (mode, load), and where each mode
saturated (commands/sweep.py serves the points; reports/plots.py draws them)."""

import json
import math
from dataclasses import asdict, dataclass, replace

LOAD_LABELS = {"request_rate": "rate req/s", "max_concurrency": "concurrency"}
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
]


def sweep_table(points: list[SweepPoint]) -> list[str]:
    """One row per point, the mode named on its first row only, so each curve reads downwards."""
    load_title = LOAD_LABELS[points[0].load_name]
    headers = ["mode", load_title] + [title for _, title, _ in COLUMNS]
    rows = []
    for index, point in enumerate(points):
        first_of_mode = index == 0 or points[index - 1].mode_name != point.mode_name
        rows.append([point.mode_name if first_of_mode else "", load_text(point.load)]
                    + [fmt.format(point.metrics[key]) for key, _, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in rows + [headers]) for i in range(len(headers))]
    lines = []
    for row in [headers] + rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return lines


def sweep_line(points: list[SweepPoint]) -> str:
    """What the sweep varied, for the header (whose workload line shows the first point)."""
    loads = ", ".join(load_text(load) for load in dict.fromkeys(p.load for p in points))
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
    flag = "--request-rates" if last.load_name == "request_rate" else "--concurrencies"
    loads = ",".join(load_text(point.load) for point in curve + [replace(last, load=2 * last.load)])
    return (f"- {mode_name} did not saturate within this sweep: its throughput was still rising "
            f"at {load_phrase(last)} ({rising} output tok/s); try a higher load, e.g. "
            f"{flag} {loads}.")


def load_phrase(point: SweepPoint) -> str:
    """"4 req/s" or "concurrency 8": a point's load in words."""
    if point.load_name == "request_rate":
        return f"{load_text(point.load)} req/s"
    return f"concurrency {load_text(point.load)}"


def sweep_json(config, plan, workload_params: dict, slos_ms: dict, points) -> str:
    """The JSON README documents: config, workload, and one result per (mode, point), each naming
    its request_rate and max_concurrency. `workload_params` describe the workload apart from
    the load the sweep varies (which is null there)."""
    config_json = asdict(config)
    config_json.update(num_gpu_blocks=plan.num_gpu_blocks, kv_cache_tokens=plan.kv_cache_tokens)
    workload_json = {**workload_params, points[0].load_name: None}
    workload_json["request_rate"] = _json_rate(workload_json.get("request_rate"))
    results = []
    for point in points:
        entry = {"mode": point.mode_name,
                 "request_rate": workload_json.get("request_rate"),
                 "max_concurrency": workload_json.get("max_concurrency")}
        entry[point.load_name] = point.load
        entry["request_rate"] = _json_rate(entry["request_rate"])
        results.append({**entry, **point.metrics})
    document = {"config": config_json, "workload": workload_json,
                "sweep": {"load": points[0].load_name, "goodput_slos_ms": slos_ms},
                "results": results}
    return json.dumps(document, indent=2, allow_nan=False)


def _json_rate(request_rate):
    """inf -> "inf", as vllm bench serve writes it (JSON has no infinity); else unchanged."""
    if isinstance(request_rate, float) and math.isinf(request_rate):
        return "inf"
    return request_rate
