"""`sweep`: the same workload at rising load, in each mode: the latency-throughput curve.

How a serving engineer reads a scheduler: offer more and more load and watch two numbers.

    load low     every mode keeps up: output tok/s = load x mean output length, latency = work
    load rises   throughput rises with it ... until the engine saturates
    saturated    throughput goes flat; the extra requests queue, so TTFT climbs with the run

STATIC saturates first: each batch pads every prompt to the longest and decodes until its longest
output is done, and its contiguous KV reservations cap the batch. CONTINUOUS and
CONTINUOUS+CHUNKED saturate later, at about the same throughput; what chunking buys is the tail:
P99 ITL stays at a chunk's step time instead of a whole long prompt's.

Defaults, and why: the compare workload (100 mixed requests, 10% of them 6-8k-token documents)
at 1, 2, 4, 8 and 16 req/s. 1 req/s is light for continuous batching on the default H200 but
already too much for STATIC; by 16 req/s every mode is saturated, so each curve shows its knee.
Goodput counts requests with TTFT <= 3 s and TPOT <= 50 ms: an interactive chat target, whose
per-token bound is the lesson's P99 ITL without chunked prefill (~50 ms). Goodput rises with the
load, peaks, and collapses once the queue pushes TTFT past its target.

Every point is a fresh run of the same requests (same seed) at another arrival rate or
concurrency; with no observers attached, each run takes the engine's fast path.
"""

import json
import math
from dataclasses import asdict, dataclass

from config import ConfigError
from goodput import add_request_goodput

SWEEP_MODES = ("static", "continuous", "chunked")
SWEEP_RATES = (1, 2, 4, 8, 16)
SWEEP_GOODPUT = ("ttft:3000", "tpot:50")
LOAD_LABELS = {"request_rate": "rate req/s", "max_concurrency": "concurrency"}


@dataclass
class SweepPoint:
    mode_name: str
    load_name: str   # "request_rate" or "max_concurrency": what the sweep varies
    load: float      # its value at this point
    metrics: dict    # RunRecorder.summary() plus request_goodput


def parse_loads(flag: str, text: str, integer: bool) -> list[float]:
    """"1,2,4,8" -> [1.0, 2.0, 4.0, 8.0]: positive, rising (inf allowed for rates)."""
    loads = []
    for item in text.split(","):
        try:
            value = int(item) if integer else float(item)
        except ValueError:
            value = -1
        if not value > 0 or (integer and math.isinf(value)):
            kind = "positive integers" if integer else "positive numbers (or inf)"
            raise ConfigError(f"{flag} takes a comma list of {kind}, e.g. "
                              f"{'1,8,32' if integer else '1,2,4,8'}; got {item!r} in {text!r}")
        loads.append(value)
    if any(later <= earlier for earlier, later in zip(loads, loads[1:])):
        raise ConfigError(f"{flag} must rise from point to point (e.g. 1,2,4,8), got {text!r}")
    return loads


def run_points(simulate, modes, workloads, config, num_gpu_blocks, clock, load_name,
               slos_ms) -> list[SweepPoint]:
    """Serve every (load, workload) in every mode; points in mode order, then load order."""
    points = []
    for mode in modes:
        for load, workload in workloads:
            recorder = simulate(workload, mode, config, num_gpu_blocks, clock)
            metrics = add_request_goodput(recorder.summary(), recorder, slos_ms)
            points.append(SweepPoint(mode.name, load_name, load, metrics))
    return points


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
    """Per mode, the highest throughput reached and the load at which it was first within 5%."""
    lines = []
    for mode_name in dict.fromkeys(point.mode_name for point in points):
        curve = [point for point in points if point.mode_name == mode_name]
        best = max(point.metrics["output_throughput"] for point in curve)
        knee = next(point for point in curve if point.metrics["output_throughput"] >= 0.95 * best)
        lines.append(f"- {mode_name} saturates at about {best:,.0f} output tok/s (within 5% "
                     f"from {load_phrase(knee)} on); there P99 TTFT is "
                     f"{knee.metrics['p99_ttft_ms']:,.0f} ms and P99 ITL "
                     f"{knee.metrics['p99_itl_ms']:,.1f} ms.")
    return lines


def load_phrase(point: SweepPoint) -> str:
    """"4 req/s" or "concurrency 8": a point's load in words."""
    if point.load_name == "request_rate":
        return f"{load_text(point.load)} req/s"
    return f"concurrency {load_text(point.load)}"


def sweep_json(config, plan, workload_params: dict, slos_ms: dict, points) -> str:
    """DESIGN.md's JSON shape: config, workload, and one result per (mode, point), each naming
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
    return json.dumps(document, indent=2)


def _json_rate(request_rate):
    """inf -> "inf", as vllm bench serve writes it (JSON has no infinity); else unchanged."""
    if isinstance(request_rate, float) and math.isinf(request_rate):
        return "inf"
    return request_rate
