"""--svg: one self-contained SVG whose every series is the run's own data."""

import xml.etree.ElementTree as ElementTree

import pytest

from commands.serving import Engine, Watch, serve_modes
from config import EngineConfig
from forward_model import make_clock
from gpu_memory import plan_memory
from main import simulate
from modes import MODES
from reports import plots
from reports.plots import decimate_min_max
from reports.sweep_table import SweepPoint
from workload import mixed_workload

SVG = "{http://www.w3.org/2000/svg}"
TIME_SERIES_CHARTS = ("itl-over-time", "kv-blocks-over-time", "queues-over-time")


@pytest.fixture(scope="module")
def runs():
    config = EngineConfig()
    modes = [MODES[name] for name in ("static", "continuous", "chunked")]
    engine = Engine(simulate, config, modes, plan_memory(config), make_clock(config), {})
    return serve_modes(engine, mixed_workload(20, 4.0, 1.0, 0), Watch(series=True))


@pytest.fixture(scope="module")
def svg_text(runs):
    return plots.runs_svg(["servesim test", "line 2", "line 3"], runs, num_pool_blocks=11411)


def charts(svg_text: str) -> dict:
    root = ElementTree.fromstring(svg_text)
    return {g.get("id"): g for g in root.iter(f"{SVG}g") if g.get("class") == "chart"}


def series(panel, label: str) -> list:
    """The points of one drawn series: polyline points, or the dots of a path."""
    for element in panel:
        if element.get("data-series") == label:
            if element.tag == f"{SVG}polyline":
                return element.get("points").split()
            return element.get("d").split("M")[1:]
    raise AssertionError(f"no series {label!r}")


def mode_panels(chart) -> dict:
    return {panel.get("data-mode"): panel for panel in chart if panel.get("class") == "panel"}


# -- the thinning rule ------------------------------------------------------------------------

def test_decimation_keeps_a_short_series_whole():
    points = [(float(x), float(x % 3)) for x in range(10)]
    assert decimate_min_max(points, num_bins=5) == points


def test_decimation_keeps_each_slices_lowest_and_highest_point_in_order():
    # 12 points over x in [0, 11], 3 slices: [0, 11/3), [11/3, 22/3), [22/3, 11]
    ys = [5, 1, 9, 4, 4, 0, 7, 2, 3, 8, 6, 6]
    points = [(float(x), float(y)) for x, y in enumerate(ys)]
    assert decimate_min_max(points, num_bins=3) == [
        (1.0, 1.0), (2.0, 9.0),   # slice 0: x 0-3
        (5.0, 0.0), (6.0, 7.0),   # slice 1: x 4-7
        (8.0, 3.0), (9.0, 8.0)]   # slice 2: x 8-11


def test_decimation_of_a_long_series_is_a_small_subset_keeping_both_extremes(runs):
    points = plots.itl_points(runs[1])
    kept = decimate_min_max(points, num_bins=50)
    assert len(points) > 100 and len(kept) <= 100
    assert set(kept) <= set(points) and kept == sorted(kept, key=points.index)
    assert max(points, key=lambda p: p[1]) in kept and min(points, key=lambda p: p[1]) in kept


# -- the charts -------------------------------------------------------------------------------

def test_svg_parses_and_holds_one_chart_per_item(svg_text):
    assert set(charts(svg_text)) == {*TIME_SERIES_CHARTS, "ttft-cdf"}
    for chart_id in TIME_SERIES_CHARTS:
        assert list(mode_panels(charts(svg_text)[chart_id])) == [
            "STATIC", "CONTINUOUS", "CONTINUOUS+CHUNKED"]


def test_svg_is_self_contained(svg_text):
    for outside in ("<script", "href", "url(", "@import", "<style"):
        assert outside not in svg_text


def test_itl_dots_are_the_runs_gaps(runs, svg_text):
    panels = mode_panels(charts(svg_text)["itl-over-time"])
    for run in runs:
        points = plots.itl_points(run)
        gaps = sum(point.count for point in run.series.itl_points)
        assert gaps == run.recorder.itl_gaps.num_tokens  # every token gap, counted once
        drawn = series(panels[run.name], "each gap")
        assert len(drawn) == len(decimate_min_max(points))


def test_kv_line_ends_at_the_last_steps_blocks(runs, svg_text):
    panels = mode_panels(charts(svg_text)["kv-blocks-over-time"])
    for run in runs:
        points = plots.kv_points(run)
        assert len(points) == run.recorder.num_steps
        assert points[-1] == (run.series.end_s[-1], run.series.kv_blocks[-1])
        assert len(series(panels[run.name], "held")) == len(decimate_min_max(points))


def test_queue_lines_have_a_point_per_step(runs, svg_text):
    panels = mode_panels(charts(svg_text)["queues-over-time"])
    for run in runs:
        for label, waiting in (("in the batch", False), ("waiting", True)):
            points = plots.queue_points(run, waiting)
            assert len(points) == run.recorder.num_steps
            assert len(series(panels[run.name], label)) == len(decimate_min_max(points))
        assert plots.queue_points(run, waiting=True)[-1][1] == plots.QUEUE_FLOOR  # none left


def test_ttft_cdf_has_one_point_per_completed_request(runs, svg_text):
    chart = charts(svg_text)["ttft-cdf"]
    panel = next(iter(chart))
    for run in runs:
        points = plots.ttft_cdf_points(run)
        assert len(points) == run.recorder.summary()["completed"] == 20
        assert points[-1][1] == 1.0
        assert len(series(panel, run.name)) == 20  # under the thinning threshold: all drawn


def test_same_run_same_bytes(runs, svg_text):
    assert plots.runs_svg(["servesim test", "line 2", "line 3"], runs, 11411) == svg_text


def test_sweep_svg_holds_four_charts_with_one_point_per_load():
    points = [SweepPoint(mode, "request_rate", rate,
                         {"output_throughput": 100 * rate, "p99_ttft_ms": 500.0 * rate,
                          "p99_itl_ms": 30.0, "request_goodput": 1.0})
              for mode in ("STATIC", "CONTINUOUS") for rate in (1, 2, 4, 8)]
    root = charts(plots.sweep_svg(["title", "workload", "sweep"], points))
    assert set(root) == {"sweep-throughput", "sweep-p99-ttft", "sweep-p99-itl",
                         "sweep-goodput"}
    for chart in root.values():
        panel = next(iter(chart))
        assert len(series(panel, "STATIC")) == len(series(panel, "CONTINUOUS")) == 4


def x_tick_labels(panel) -> list[str]:
    """The tick labels under a panel's x axis (size 10, centred)."""
    return [t.text for t in panel if t.tag == f"{SVG}text" and t.get("font-size") == "10"
            and t.get("text-anchor") == "middle"]


def test_every_mode_draws_on_one_time_axis(runs, svg_text):
    last_end_s = max(run.series.end_s[-1] for run in runs)
    for chart_id in TIME_SERIES_CHARTS:
        ticks = [x_tick_labels(panel) for panel in mode_panels(charts(svg_text)[chart_id]).values()]
        assert all(labels == ticks[0] for labels in ticks)
        assert float(ticks[0][-1].replace(",", "")) <= last_end_s


def test_legends_sit_above_the_plot_area_not_on_the_data(svg_text):
    for chart_id in (*TIME_SERIES_CHARTS, "ttft-cdf"):
        for panel in charts(svg_text)[chart_id]:
            frame_top = min(float(line.get("y1")) for line in panel if line.tag == f"{SVG}line"
                            and line.get("stroke") == "#999999" and line.get("x1") == line.get("x2"))
            keys = [float(t.get("y")) for t in panel if t.tag == f"{SVG}text"
                    and t.get("font-size") == "10" and t.get("text-anchor") == "start"]
            assert keys and max(keys) < frame_top


def test_naives_one_running_request_stands_above_the_floor_of_the_queue_axis():
    config = EngineConfig()
    engine = Engine(simulate, config, [MODES["naive"]], plan_memory(config), make_clock(config), {})
    [naive] = serve_modes(engine, mixed_workload(6, 4.0, 1.0, 0), Watch(series=True))
    in_batch = [y for _, y in plots.queue_points(naive, waiting=False)]
    assert set(in_batch) == {1}  # every step computes its one request
