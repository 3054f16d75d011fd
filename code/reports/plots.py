"""`--svg PATH`: what the scheduler did, as charts in one self-contained SVG file.

For `compare` and `run`, one row of three panels per mode, each in the mode's colour, then one
chart across all modes:

    ITL over time      every inter-token gap (ms) at the virtual time its token came out:
                       a whole long prefill shows as a spike that every decoding request felt
    KV blocks held     blocks in use while each step ran, against the pool size: paged modes
                       fill and free block by block; NAIVE and STATIC reserve max_model_len
                       slots per request up front (drawn as reserved slots / block_size)
    queues             requests in each step's batch (solid) and waiting after it (dashed), on a
                       log scale so that NAIVE's one request shows beside eighty waiting
Every time series of every mode shares one time axis, so a mode that takes longer draws longer.
    TTFT CDF           the share of requests whose first token came within x seconds (log x)

For `sweep`, four panels against the offered load (request rate or concurrency): output
throughput, P99 TTFT, P99 ITL and goodput, one line per mode: where throughput stops rising the
mode is saturated, and latency shoots up.

Long series are thinned before drawing so that files stay small (`decimate_min_max`): the time
axis is cut into MAX_BINS equal slices and each slice keeps its lowest and its highest point, so
every spike and every dip survives; every point drawn is one of the run's own.
"""

import math
from dataclasses import dataclass

from reports.svg import Canvas, Line, Panel, fmt, nice_top, render_panel
from reports.sweep_table import SweepPoint, load_text

MODE_COLORS = {  # Okabe-Ito colours: distinct for colour-blind readers too
    "NAIVE": "#7f7f7f",
    "STATIC": "#e69f00",
    "CONTINUOUS": "#0072b2",
    "CONTINUOUS+CHUNKED": "#009e73",
}
MAX_BINS = 200           # slices of a time axis: at most 2 x MAX_BINS points per line
WIDTH = 980
PADDING = 20
ROW_LABEL_HEIGHT = 24
ROW_HEIGHT = 200
CDF_HEIGHT = 290
CAPTION = (f"One point per engine step, thinned to the lowest and highest of each of {MAX_BINS} "
           "time slices, so every spike stays; one virtual time axis for all modes.")
TIME_LABEL = "virtual time (s), shared by the modes"
QUEUE_FLOOR = 0.5  # where a log axis of requests draws an empty queue (0 has no logarithm)


def decimate_min_max(points: list[tuple[float, float]],
                     num_bins: int = MAX_BINS) -> list[tuple[float, float]]:
    """Keep, of points sorted by x, the lowest and highest y in each of `num_bins` x-slices.

    A short series (at most 2 x num_bins points) is kept whole. Otherwise the result is a
    subsequence of `points` (order kept) with at most 2 x num_bins points, and it contains the
    series' overall lowest and highest points. Ties keep the first point.
    """
    if len(points) <= 2 * num_bins:
        return list(points)
    x_first, x_last = points[0][0], points[-1][0]
    span = (x_last - x_first) or 1.0
    lowest: dict[int, int] = {}   # slice -> index of its lowest point
    highest: dict[int, int] = {}
    for index, (x, y) in enumerate(points):
        slice_index = min(int((x - x_first) / span * num_bins), num_bins - 1)
        if slice_index not in lowest or y < points[lowest[slice_index]][1]:
            lowest[slice_index] = index
        if slice_index not in highest or y > points[highest[slice_index]][1]:
            highest[slice_index] = index
    kept = sorted(set(lowest.values()) | set(highest.values()))
    return [points[index] for index in kept]


# -- the run's own data, as points (before thinning) ------------------------------------------

def itl_points(run) -> list[tuple[float, float]]:
    """(virtual time s, ITL ms): one point per distinct gap per step."""
    return [(point.end_s, 1000 * point.itl_s) for point in run.series.itl_points]


def kv_points(run) -> list[tuple[float, float]]:
    return list(zip(run.series.end_s, run.series.kv_blocks))


def queue_points(run, waiting: bool) -> list[tuple[float, float]]:
    """(virtual time s, requests); an empty queue at QUEUE_FLOOR, the log axis's bottom."""
    counts = run.series.num_waiting if waiting else run.series.num_seqs
    return [(end_s, max(count, QUEUE_FLOOR)) for end_s, count in zip(run.series.end_s, counts)]


def ttft_cdf_points(run) -> list[tuple[float, float]]:
    """(TTFT s, share of completed requests with a TTFT at most that): one point per request."""
    ttfts_s = sorted(r.first_token_s - r.arrival_s for r in run.recorder.completed())
    return [(ttft_s, (rank + 1) / len(ttfts_s)) for rank, ttft_s in enumerate(ttfts_s)]


def thin_cdf(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Thin a CDF along its share axis (its TTFT axis is logarithmic and crowded at the low end)."""
    swapped = decimate_min_max([(share, ttft_s) for ttft_s, share in points])
    return [(ttft_s, share) for share, ttft_s in swapped]


# -- compare and run --------------------------------------------------------------------------

def runs_svg(title_lines: list[str], runs: list, num_pool_blocks: float) -> str:
    """The time series of every mode's run, one row per mode, and the TTFT CDF of all.

    `runs` are commands/serving.ModeRun: each mode's `name`, `recorder` and `series`.
    """
    runs, whole_runs = [lane for run in runs for lane in lane_runs(run)], runs
    canvas = Canvas(WIDTH, 0)
    top = _header(canvas, title_lines, [CAPTION])
    column_width = (WIDTH - 2 * PADDING) / 3
    row_span = ROW_LABEL_HEIGHT + ROW_HEIGHT
    y_tops = {"itl-over-time": nice_top(max([1.0] + [ms for run in runs
                                                    for _, ms in itl_points(run)])),
              "kv-blocks-over-time": num_pool_blocks,
              "queues-over-time": _decade_above(max(_largest_queue(run) for run in runs))}
    time_range = (0.0, max(max(run.series.end_s, default=0.0) for run in runs) or 1.0)
    for row, run in enumerate(runs):
        _row_label(canvas, run, top + row * row_span)
    charts = [("itl-over-time", _itl_panel), ("kv-blocks-over-time", _kv_panel),
              ("queues-over-time", _queue_panel)]
    for column, (chart_id, make_panel) in enumerate(charts):
        canvas.add(f'<g class="chart" id="{chart_id}">')
        for row, run in enumerate(runs):
            panel = make_panel(run, PADDING + column * column_width,
                               top + row * row_span + ROW_LABEL_HEIGHT, column_width,
                               y_tops[chart_id], time_range)
            render_panel(canvas, panel, f' data-mode="{run.name}"')
        canvas.add("</g>")
    cdf_top = top + len(runs) * row_span
    canvas.add('<g class="chart" id="ttft-cdf">')
    render_panel(canvas, _cdf_panel(whole_runs, cdf_top))
    canvas.add("</g>")
    canvas.height = cdf_top + CDF_HEIGHT + PADDING
    return canvas.document(title_lines[0])


def _header(canvas: Canvas, title_lines: list[str], captions: list[str]) -> float:
    """Title, then the other lines, then grey captions; returns where the charts may start."""
    canvas.text(PADDING, 30, title_lines[0], size=18, weight="bold")
    y = 30
    for line in title_lines[1:]:
        y += 17
        canvas.text(PADDING, y, line, size=12)
    for caption in captions:
        y += 17
        canvas.text(PADDING, y, caption, size=11, color="#666666")
    return y + 12


@dataclass(frozen=True)
class LaneRun:
    """One replica of a cluster's run (cluster.py), drawn as a row of its own."""
    name: str          # the mode's, for its colour
    recorder: object   # the cluster's: the P99 ITL line is the whole run's
    series: object     # the replica's own StepSeries
    replica: int

    @property
    def label(self) -> str:
        return f"{self.name}, replica {self.replica}"


def lane_runs(run) -> list:
    """A run's rows: the run itself, or one lane per replica of a cluster."""
    if not run.series.lanes:
        return [run]
    return [LaneRun(run.name, run.recorder, lane, index)
            for index, lane in enumerate(run.series.lanes)]


def _largest_queue(run) -> int:
    return max(run.series.num_seqs + run.series.num_waiting, default=1)


def _row_label(canvas: Canvas, run, top: float) -> None:
    metrics = run.recorder.summary()
    label = getattr(run, "label", run.name)
    canvas.text(PADDING, top + 17, label, size=14, weight="bold", color=_color(run.name))
    if isinstance(run, LaneRun):
        replica = metrics["replicas"][run.replica]
        figures = (f"{replica['role']}: {replica['requests']} requests, "
                   f"{replica['output_throughput']:,.0f} output tok/s, busy "
                   f"{replica['busy_pct']:.0f}%")
    else:
        figures = (f"{metrics['output_throughput']:,.0f} output tok/s, mean TTFT "
                   f"{metrics['mean_ttft_ms']:,.0f} ms, P99 ITL {metrics['p99_itl_ms']:,.1f} ms")
    canvas.text(PADDING + 14 + 10.5 * len(label), top + 17, figures, size=12, color="#555555")


def _itl_panel(run, x: float, y: float, width: float, y_top: float, time_range) -> Panel:
    """Dots, not a line: the gaps of one step and the next are separate samples."""
    color = _color(run.name)
    dots = Line("each gap", color, decimate_min_max(itl_points(run)), connect=False)
    p99_ms = run.recorder.summary()["p99_itl_ms"]
    p99 = Line(f"P99 {p99_ms:,.1f} ms", color, [(time_range[0], p99_ms), (time_range[1], p99_ms)],
               dashed=True)
    return Panel(x, y, width, ROW_HEIGHT, "Inter-token latency", TIME_LABEL, "ITL (ms)",
                 time_range, (0.0, y_top), [dots, p99], title_color=color, legend="above")


def _kv_panel(run, x: float, y: float, width: float, num_pool_blocks: float, time_range) -> Panel:
    title = "KV blocks held"
    if not run.series.is_paged:
        title = f"KV reserved (contiguous slots / {run.series.block_size})"
    used = Line("held", _color(run.name), decimate_min_max(kv_points(run)))
    pool = Line(f"pool {num_pool_blocks:,.0f}", "#999999",
                [(time_range[0], num_pool_blocks), (time_range[1], num_pool_blocks)], dashed=True)
    return Panel(x, y, width, ROW_HEIGHT, title, TIME_LABEL,
                 f"KV blocks ({run.series.block_size} tokens)", time_range,
                 (0.0, nice_top(num_pool_blocks)), [used, pool], title_color=_color(run.name),
                 legend="above")


def _queue_panel(run, x: float, y: float, width: float, y_top: float, time_range) -> Panel:
    """Log scale, so that one running request (NAIVE's) stands as clear as eighty waiting."""
    color = _color(run.name)
    running = Line("in the batch", color, decimate_min_max(queue_points(run, waiting=False)))
    waiting = Line("waiting", color, decimate_min_max(queue_points(run, waiting=True)),
                   dashed=True)
    return Panel(x, y, width, ROW_HEIGHT, "Requests in the batch and waiting", TIME_LABEL,
                 "requests (log; 0 at the floor)", time_range, (QUEUE_FLOOR, y_top),
                 [running, waiting], title_color=color, legend="above", log_y=True)


def _cdf_panel(runs: list, top: float) -> Panel:
    lines = [Line(run.name, _color(run.name), thin_cdf(ttft_cdf_points(run))) for run in runs]
    ttfts_s = [x for line in lines for x, _ in line.points]
    positive = [t for t in ttfts_s if t > 0]
    log_x = bool(positive) and len(positive) == len(ttfts_s)
    x_range = _decade_range(positive) if log_x else (0.0, nice_top(max(ttfts_s, default=1.0)))
    x_label = "time to first token (s, log scale)" if log_x else "time to first token (s)"
    title = "Time to first token: share of requests served within x seconds"
    return Panel(PADDING, top, WIDTH - 2 * PADDING, CDF_HEIGHT,
                 title + (" (all modes)" if len(runs) > 1 else ""),
                 x_label, "share of requests", x_range, (0.0, 1.0), lines, log_x=log_x,
                 legend="above")


# -- sweep --------------------------------------------------------------------------------------

# (chart id, title, y label, metric key, scale to the unit shown, log y)
SWEEP_CHARTS = [
    ("sweep-throughput", "Output throughput: flat once saturated", "output tokens/s",
     "output_throughput", 1.0, False),
    ("sweep-p99-ttft", "P99 time to first token: the queue", "P99 TTFT (s, log scale)",
     "p99_ttft_ms", 0.001, True),
    ("sweep-p99-itl", "P99 inter-token latency: the stalls", "P99 ITL (ms)", "p99_itl_ms", 1.0,
     False),
    ("sweep-goodput", "Goodput: requests meeting every SLO", "goodput (req/s)",
     "request_goodput", 1.0, False),
]
SWEEP_PANEL_HEIGHT = 300
SWEEP_X_LABELS = {"request_rate": "offered load: request rate (req/s)",
                  "max_concurrency": "offered load: max concurrency (requests in flight)",
                  "max_num_batched_tokens": "token budget per step (--max-num-batched-tokens)"}
SWEEP_CAPTION = ("Each point is a full run of the same requests at that load; points are evenly "
                 "spaced whatever their values.")


def sweep_svg(title_lines: list[str], points: list[SweepPoint]) -> str:
    """Four panels against the offered load, one line per mode; loads evenly spaced."""
    loads = list(dict.fromkeys(point.load for point in points))
    modes = list(dict.fromkeys(point.mode_name for point in points))
    canvas = Canvas(WIDTH, 0)
    top = _header(canvas, title_lines, [SWEEP_CAPTION])
    top = _legend_row(canvas, modes, top)
    panel_width = (WIDTH - 2 * PADDING) / 2
    x_label = SWEEP_X_LABELS[points[0].load_name]
    for index, (chart_id, title, y_label, key, scale, log_y) in enumerate(SWEEP_CHARTS):
        lines = [Line(mode, _color(mode), [(loads.index(p.load), scale * p.metrics[key])
                                           for p in points if p.mode_name == mode], markers=True)
                 for mode in modes]
        values = [y for line in lines for _, y in line.points]
        log_y = log_y and min(values) > 0
        y_range = _decade_range(values) if log_y else (0.0, nice_top(max(values)))
        canvas.add(f'<g class="chart" id="{chart_id}">')
        render_panel(canvas, Panel(
            PADDING + (index % 2) * panel_width, top + (index // 2) * SWEEP_PANEL_HEIGHT,
            panel_width, SWEEP_PANEL_HEIGHT, title, x_label, y_label,
            (-0.3, len(loads) - 0.7), y_range, lines, log_y=log_y,
            x_tick_labels=[load_text(load) for load in loads]))
        canvas.add("</g>")
    canvas.height = top + 2 * SWEEP_PANEL_HEIGHT + PADDING
    return canvas.document(title_lines[0])


def _legend_row(canvas: Canvas, modes: list[str], top: float) -> float:
    """The modes' colours in one row across the page (one legend for every panel)."""
    x = PADDING
    for mode in modes:
        canvas.line(x, top + 8, x + 22, top + 8, _color(mode), 2.0)
        canvas.add(f'<circle cx="{fmt(x + 11)}" cy="{fmt(top + 8)}" r="3" fill="{_color(mode)}"/>')
        canvas.text(x + 28, top + 12, mode, size=12, weight="bold", color=_color(mode))
        x += 50 + 8 * len(mode)
    return top + 24


def _decade_above(value: float) -> float:
    """The power of ten at or above `value` (at least 10): a log axis's top."""
    return 10.0 ** max(1, math.ceil(math.log10(max(value, 1))))


def _decade_range(values: list[float]) -> tuple[float, float]:
    low = 10 ** math.floor(math.log10(min(values)))
    high = 10 ** math.ceil(math.log10(max(values)))
    return (low, high * 10) if low == high else (low, high)


def _color(mode_name: str) -> str:
    return MODE_COLORS.get(mode_name, "#333333")
