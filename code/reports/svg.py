"""A tiny SVG writer: panels with axes, a light grid, lines and legends. Standard library only.

The output is one self-contained file: no scripts, no external fonts or style sheets, so it opens
in any browser and can be committed next to the code. It is also deterministic, byte for byte:
every coordinate is written with one decimal, every label with a fixed format, and nothing
depends on the clock or the machine.

A `Panel` is one chart: a plot area with a title, axis labels (units in them), ticks, grid lines
and any number of `Line`s in data coordinates; `render_panel` maps them to pixels.

    ┌ title ───────────────────────────┐
    │ 800 ┤ · · · · · · · · · ·   legend│   the plot area sits inside fixed margins;
    │ 400 ┤ · · /\\· · · · · · ·        │   a log axis maps log10(value) linearly
    │   0 ┼────────────────────────────│
    │     0      10      20      30    │
    │        virtual time (s)          │
    └──────────────────────────────────┘
"""

import math
from dataclasses import dataclass, field
from typing import Optional
from html import escape

FONT = "font-family=\"Helvetica, Arial, sans-serif\""
GRID_COLOR = "#e6e6e6"
AXIS_COLOR = "#999999"
TEXT_COLOR = "#333333"
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 58, 14, 26, 42
LEGEND_BAND = 16  # extra top margin of a panel whose legend sits above its plot area


@dataclass
class Line:
    label: str
    color: str
    points: list[tuple[float, float]]  # data coordinates, in drawing order
    dashed: bool = False
    markers: bool = False  # a dot on every point (for a few points, e.g. a sweep)
    connect: bool = True   # False: dots only, for scattered samples such as every ITL


@dataclass
class Panel:
    x: float          # top-left corner of the whole panel, pixels
    y: float
    width: float
    height: float
    title: str
    x_label: str
    y_label: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    lines: list[Line] = field(default_factory=list)
    log_x: bool = False
    log_y: bool = False
    x_tick_labels: Optional[list[str]] = None  # categories at x = 0, 1, 2, ... instead of numbers
    title_color: str = TEXT_COLOR
    legend: str = ""  # "" (none), "above" (a row between the title and the plot, off the data),
    #                   "top-right" or "top-left" (a card in that corner of the plot area)


def fmt(value: float) -> str:
    """A pixel coordinate: one decimal, no "-0.0"."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def nice_step(span: float, approx_count: int = 5) -> float:
    """A round step that cuts `span` into about `approx_count` parts: 1, 2, 2.5 or 5 x 10^k."""
    raw_step = span / approx_count
    power = 10 ** math.floor(math.log10(raw_step))
    for multiple in (1, 2, 2.5, 5):
        if multiple * power >= raw_step:
            return multiple * power
    return 10 * power


def nice_ticks(low: float, high: float, approx_count: int = 5) -> list[float]:
    """Round tick values within [low, high] (which must differ)."""
    step = nice_step(high - low, approx_count)
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]


def nice_top(high: float, approx_count: int = 4) -> float:
    """The round value at or above `high` where a y axis from 0 should end, on a grid line."""
    if high <= 0:
        return 1.0
    step = nice_step(high, approx_count)
    return round(math.ceil(high / step - 1e-9) * step, 12)


def decade_ticks(low: float, high: float) -> list[float]:
    """Powers of ten within [low, high], for a log axis."""
    return [10.0 ** e for e in range(math.ceil(math.log10(low) - 1e-9),
                                     math.floor(math.log10(high) + 1e-9) + 1)]


def tick_label(value: float) -> str:
    """1500 -> "1,500", 0.25 -> "0.25", 2.0 -> "2": as few digits as the value needs."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.6f}".rstrip("0")


class Canvas:
    """Collects SVG elements in order; `document()` wraps them into one file."""

    def __init__(self, width: float, height: float):
        self.width = width
        self.height = height
        self.parts: list[str] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, content: str, size: int = 11, anchor: str = "start",
             color: str = TEXT_COLOR, weight: str = "normal", rotate: bool = False) -> None:
        transform = f' transform="rotate(-90 {fmt(x)} {fmt(y)})"' if rotate else ""
        bold = ' font-weight="bold"' if weight == "bold" else ""
        self.add(f'<text x="{fmt(x)}" y="{fmt(y)}" font-size="{size}" text-anchor="{anchor}" '
                 f'fill="{color}"{bold}{transform}>{escape(content, quote=False)}</text>')

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str,
             width: float = 1.0, dashed: bool = False) -> None:
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        self.add(f'<line x1="{fmt(x1)}" y1="{fmt(y1)}" x2="{fmt(x2)}" y2="{fmt(y2)}" '
                 f'stroke="{color}" stroke-width="{width}"{dash}/>')

    def document(self, title: str) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{fmt(self.width)}" '
                f'height="{fmt(self.height)}" viewBox="0 0 {fmt(self.width)} {fmt(self.height)}" '
                f'{FONT}>')
        background = f'<rect width="{fmt(self.width)}" height="{fmt(self.height)}" fill="white"/>'
        return "\n".join([head, f"<title>{escape(title, quote=False)}</title>", background, *self.parts,
                          "</svg>"]) + "\n"


def render_panel(canvas: Canvas, panel: Panel, group_attributes: str = "") -> None:
    """Draw one panel: frame, grid, ticks, axis labels, lines, legend."""
    legend_band = LEGEND_BAND if panel.legend == "above" else 0
    left, top = panel.x + MARGIN_LEFT, panel.y + MARGIN_TOP + legend_band
    width = panel.width - MARGIN_LEFT - MARGIN_RIGHT
    height = panel.height - MARGIN_TOP - legend_band - MARGIN_BOTTOM
    to_x = _scale(panel.x_range, left, left + width, panel.log_x)
    to_y = _scale(panel.y_range, top + height, top, panel.log_y)
    canvas.add(f'<g class="panel"{group_attributes}>')
    canvas.text(panel.x + 6, panel.y + 16, panel.title, size=12, weight="bold",
                color=panel.title_color)
    _draw_x_axis(canvas, panel, to_x, top, height)
    _draw_y_axis(canvas, panel, to_y, left, width)
    canvas.line(left, top + height, left + width, top + height, AXIS_COLOR)
    canvas.line(left, top, left, top + height, AXIS_COLOR)
    for line in panel.lines:
        _draw_line(canvas, line, to_x, to_y)
    if panel.legend == "above":
        _draw_legend_row(canvas, panel.lines, left, top - 8)
    elif panel.legend:
        _draw_legend(canvas, panel.lines, panel.legend, (left + 6, left + width - 6), top + 6)
    canvas.add("</g>")


def _scale(data_range: tuple[float, float], pixel_low: float, pixel_high: float, log: bool):
    low, high = data_range
    if log:
        low, high = math.log10(low), math.log10(high)

    def to_pixel(value: float) -> float:
        position = math.log10(value) if log else value
        return pixel_low + (position - low) / (high - low) * (pixel_high - pixel_low)
    return to_pixel


def _draw_x_axis(canvas: Canvas, panel: Panel, to_x, top: float, height: float) -> None:
    if panel.x_tick_labels is not None:
        ticks = [(float(i), label) for i, label in enumerate(panel.x_tick_labels)]
    elif panel.log_x:
        ticks = [(v, tick_label(v)) for v in decade_ticks(*panel.x_range)]
    else:
        ticks = [(v, tick_label(v)) for v in nice_ticks(*panel.x_range)]
    for value, label in ticks:
        x = to_x(value)
        canvas.line(x, top, x, top + height, GRID_COLOR)
        canvas.text(x, top + height + 14, label, size=10, anchor="middle")
    canvas.text(panel.x + MARGIN_LEFT + (panel.width - MARGIN_LEFT - MARGIN_RIGHT) / 2,
                panel.y + panel.height - 6, panel.x_label, anchor="middle")


def _draw_y_axis(canvas: Canvas, panel: Panel, to_y, left: float, width: float) -> None:
    values = decade_ticks(*panel.y_range) if panel.log_y else nice_ticks(*panel.y_range, 4)
    for value in values:
        y = to_y(value)
        canvas.line(left, y, left + width, y, GRID_COLOR)
        canvas.text(left - 5, y + 3.5, tick_label(value), size=10, anchor="end")
    middle = (to_y(panel.y_range[0]) + to_y(panel.y_range[1])) / 2
    canvas.text(panel.x + 13, middle, panel.y_label, anchor="middle", rotate=True)


def _draw_line(canvas: Canvas, line: Line, to_x, to_y) -> None:
    pixels = [(to_x(x), to_y(y)) for x, y in line.points]
    label = f'"{escape(line.label)}"'  # an attribute value, quotes escaped
    if not line.connect:
        # Every dot in one path: a zero-length stroke with round caps draws a dot.
        dots = "".join(f"M{fmt(x)} {fmt(y)}h0" for x, y in pixels)
        canvas.add(f'<path class="dots" data-series={label} d="{dots}" stroke="{line.color}" '
                   f'stroke-width="3.5" stroke-linecap="round" stroke-opacity="0.7"/>')
        return
    dash = ' stroke-dasharray="5 3"' if line.dashed else ""
    coordinates = " ".join(f"{fmt(x)},{fmt(y)}" for x, y in pixels)
    canvas.add(f'<polyline data-series={label} points="{coordinates}" '
               f'fill="none" stroke="{line.color}" stroke-width="1.5" '
               f'stroke-linejoin="round"{dash}/>')
    if line.markers:
        for x, y in pixels:
            canvas.add(f'<circle cx="{fmt(x)}" cy="{fmt(y)}" r="3" fill="{line.color}"/>')


def _draw_legend_row(canvas: Canvas, lines: list[Line], left: float, baseline: float) -> None:
    """The lines' keys side by side above the plot area, where no data is drawn."""
    x = left
    for line in lines:
        _draw_key(canvas, line, x, baseline - 3.5)
        canvas.text(x + 22, baseline, line.label, size=10)
        x += 34 + 6.2 * len(line.label)


def _draw_key(canvas: Canvas, line: Line, left: float, y: float) -> None:
    """A line's sample: a short stroke, or a dot for dots."""
    if line.connect:
        canvas.line(left, y, left + 18, y, line.color, 2.0, line.dashed)
    else:
        canvas.add(f'<circle cx="{fmt(left + 9)}" cy="{fmt(y)}" r="2.5" fill="{line.color}"/>')


def _draw_legend(canvas: Canvas, lines: list[Line], corner: str, lefts_rights: tuple,
                 top: float) -> None:
    """One row per line on a white card, in the plot area's top left or top right corner."""
    width = 30 + 6.2 * max(len(line.label) for line in lines)
    left = lefts_rights[0] if corner == "top-left" else lefts_rights[1] - width
    canvas.add(f'<rect x="{fmt(left)}" y="{fmt(top)}" width="{fmt(width)}" '
               f'height="{fmt(8 + 15 * len(lines))}" fill="white" fill-opacity="0.85" '
               f'stroke="{GRID_COLOR}"/>')
    for i, line in enumerate(lines):
        y = top + 12 + 15 * i
        _draw_key(canvas, line, left + 6, y)
        canvas.text(left + 28, y + 3.5, line.label, size=10)
