"""`python code/main.py calibration`: the virtual clock against published measurements.

servesim's clock (`forward_model.py`) prices a step from FLOPs, bytes and a few fixed costs. How
far can its figures be trusted? This command replays published measurements of real engines on
real GPUs, each as a servesim run of the same model, hardware and workload, and prints, per
measurement, the published figure, servesim's, and their ratio:

    ratio = servesim / published      below 1: a time came out shorter, a throughput lower
    |ln(ratio)|                       the error either way: 0.10 is about 10%, 0.40 about 50%

Three groups, each with its goal:

    published      16 measurements of vLLM, NIM and TensorRT-LLM serving (each group's
                   sources below): batch latency, TTFT, ITL, throughput
    throughput     TensorRT-LLM's offline throughput for Llama-3.3-70B FP8 (another engine: a band)
    kv             the KV capacity vLLM logged for the lesson's setup

The rows, their figures and their sources are in calibration_rows.py (data copied from the
sources named beside them); the servesim side is computed each time, so the table follows the
clock and the presets.
"""

import json
import math
import os
import statistics
import textwrap
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from commands.calibration_rows import GROUPS, Group, Measurement
from config import ConfigError, EngineConfig
from forward_model import RooflineClock
from gpu_memory import plan_memory
from modes import MODES
from reports.columns import aligned

@dataclass(frozen=True)
class Comparison:
    measurement: Measurement
    servesim: float

    @property
    def ratio(self) -> float:
        return self.servesim / self.measurement.published

    @property
    def abs_ln_ratio(self) -> float:
        return abs(math.log(self.ratio))


def _figure_of(measurement: Measurement, config: EngineConfig, simulate) -> float:
    """The figure servesim gives for a setup: a run's result, or the KV pool. (A ratio row's
    figure is its run's over its baseline's: compare_group.)"""
    plan = plan_memory(config)
    if measurement.result_field == "kv_cache_tokens":
        return plan.kv_cache_tokens
    result = simulate(measurement.make_workload(), MODES[measurement.mode], config,
                      plan.num_gpu_blocks, RooflineClock(config)).summary()
    if measurement.result_field == "duration_ms":
        return 1000 * result["duration"]
    return result[measurement.result_field]


def compare_group(group: Group, simulate) -> list[Comparison]:
    """Each row of the group beside the figure servesim gives for it: its run's, or for a ratio
    row its run's over its baseline run's."""
    figures = served_in_parallel(group.measurements, simulate)
    return [Comparison(m, figures[m.id]) for m in group.measurements]


# -- speed only: the group's runs served once each, in a process per core ------------------------

def served_in_parallel(measurements, simulate) -> dict[str, float]:
    """Every row's figure, by id. The runs are independent of each other, so they
    are served in a process per core; a baseline two ratio rows share (the H100's run beside
    an H200's and an MI300X's) is served once. The figures are the same as one by one."""
    runs = {}  # (row id or baseline key) -> (measurement, config)
    for m in measurements:
        runs[m.id] = (m, m.config())
        if m.baseline is not None:
            runs.setdefault(_baseline_key(m), (m, EngineConfig(**m.baseline)))
    keys = list(runs)
    tasks = [(runs[key][0], runs[key][1], simulate) for key in keys]
    workers = min(len(tasks), os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            served = dict(zip(keys, pool.map(_serve_task, tasks)))
    else:
        served = dict(zip(keys, map(_serve_task, tasks)))
    return {m.id: served[m.id] / (served[_baseline_key(m)] if m.baseline is not None else 1.0)
            for m in measurements}


def _baseline_key(m: Measurement) -> tuple:
    return (tuple(sorted(m.baseline.items())), tuple(sorted(m.workload.items())), m.mode,
            m.result_field)


def _serve_task(task) -> float:
    measurement, config, simulate = task
    return _figure_of(measurement, config, simulate)


def median_abs_ln(comparisons: list[Comparison]) -> float:
    return statistics.median(c.abs_ln_ratio for c in comparisons)


def worst(comparisons: list[Comparison]) -> Comparison:
    return max(comparisons, key=lambda c: c.abs_ln_ratio)


def meets_goal(group: Group, comparisons: list[Comparison]) -> bool:
    """Whether the group's comparisons are within every goal the group sets."""
    if group.max_median_abs_ln is not None and median_abs_ln(comparisons) > group.max_median_abs_ln:
        return False
    if group.max_worst_abs_ln is not None and worst(comparisons).abs_ln_ratio > group.max_worst_abs_ln:
        return False
    if group.ratio_band is not None:
        low, high = group.ratio_band
        return all(low <= c.ratio <= high for c in comparisons)
    return True


def goal_text(group: Group) -> str:
    goals = []
    if group.max_median_abs_ln is not None:
        goals.append(f"median |ln ratio| <= {group.max_median_abs_ln:.2f}")
    if group.max_worst_abs_ln is not None:
        goals.append(f"worst <= {group.max_worst_abs_ln:.2f}")
    if group.ratio_band is not None:
        goals.append(f"every ratio in {group.ratio_band[0]:.2f}-{group.ratio_band[1]:.2f}")
    return ", ".join(goals)


# -- the report -------------------------------------------------------------------------------

COLUMNS = ("id", "measurement", "ran on", "replayed as", "unit", "published", "servesim", "ratio",
           "|ln ratio|")
NUM_TEXT_COLUMNS = 5


def report_lines(results: list[tuple[Group, list[Comparison]]]) -> list[str]:
    lines = ["servesim calibration: the roofline clock against published measurements",
             "ratio = servesim / published (below 1: a time came out shorter, a throughput "
             "lower); |ln ratio| 0.10 is about 10% either way", ""]
    for group, comparisons in results:
        lines.append(f"{group.name}: {group.title}")
        lines += _table(comparisons)
        lines.append(_verdict(group, comparisons))
        lines += _by_family(comparisons)
        lines += [textwrap.fill(source, width=100, initial_indent="  ", subsequent_indent="    ",
                                break_on_hyphens=False)
                  for source in group.sources]
        lines.append("")
    return lines[:-1]


def _table(comparisons: list[Comparison]) -> list[str]:
    rows = [COLUMNS] + [(c.measurement.id, c.measurement.what, c.measurement.ran_on,
                         replayed_as(c.measurement), c.measurement.unit,
                         _figure(c.measurement.published), _figure(c.servesim), f"{c.ratio:.2f}",
                         f"{c.abs_ln_ratio:.3f}") for c in ordered(comparisons)]
    return aligned(rows, num_text_columns=NUM_TEXT_COLUMNS)


def replayed_as(measurement: Measurement) -> str:
    """The vLLM version and scheduling whose CPU costs the replay charged."""
    config = measurement.config()
    return f"{config.vllm_version} {'async' if config.async_scheduling else 'sync'}"


def family(measurement: Measurement) -> str:
    """A row's vendor and engine generation: what a clock's error most often follows."""
    return f"{measurement.vendor} / {measurement.generation}"


def ordered(comparisons: list[Comparison]) -> list[Comparison]:
    """Rows grouped by vendor and engine generation, in their order within each."""
    families = list(dict.fromkeys(family(c.measurement) for c in comparisons))
    return sorted(comparisons, key=lambda c: families.index(family(c.measurement)))


def by_family(comparisons: list[Comparison]) -> dict[str, list[Comparison]]:
    grouped: dict[str, list[Comparison]] = {}
    for comparison in ordered(comparisons):
        grouped.setdefault(family(comparison.measurement), []).append(comparison)
    return grouped


def _by_family(comparisons: list[Comparison]) -> list[str]:
    """One line per vendor and engine generation: how many rows, their median and worst."""
    return [f"  {name}: {len(rows)} rows, median |ln ratio| {median_abs_ln(rows):.3f}, worst "
            f"{worst(rows).abs_ln_ratio:.3f} ({worst(rows).measurement.id})"
            for name, rows in by_family(comparisons).items()]


def _figure(value: float) -> str:
    """Four significant figures or more, with thousands separators."""
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def _verdict(group: Group, comparisons: list[Comparison]) -> str:
    worst_one = worst(comparisons)
    met = "met" if meets_goal(group, comparisons) else "NOT met"
    return (f"median |ln ratio| {median_abs_ln(comparisons):.3f}, worst {worst_one.abs_ln_ratio:.3f}"
            f" ({worst_one.measurement.id}); goal: {goal_text(group)}: {met}")


def to_json(results: list[tuple[Group, list[Comparison]]]) -> dict:
    return {"groups": [{
        "name": group.name, "title": group.title, "goal": goal_text(group),
        "goal_met": meets_goal(group, comparisons),
        "median_abs_ln_ratio": median_abs_ln(comparisons),
        "worst_abs_ln_ratio": worst(comparisons).abs_ln_ratio,
        "worst_id": worst(comparisons).measurement.id,
        "sources": list(group.sources),
        "by_vendor_and_engine": {name: {"rows": len(rows),
                                        "median_abs_ln_ratio": median_abs_ln(rows),
                                        "worst_abs_ln_ratio": worst(rows).abs_ln_ratio}
                                 for name, rows in by_family(comparisons).items()},
        "rows": [{"id": c.measurement.id, "measurement": c.measurement.what,
                  "ran_on": c.measurement.ran_on, "vendor": c.measurement.vendor,
                  "engine_generation": c.measurement.generation,
                  "vllm_version": c.measurement.config().vllm_version,
                  "async_scheduling": c.measurement.config().async_scheduling,
                  "unit": c.measurement.unit, "published": c.measurement.published,
                  "servesim": c.servesim, "ratio": c.ratio,
                  "run_flags": c.measurement.flags()} for c in comparisons],
    } for group, comparisons in results]}


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser(
        "calibration", help="the virtual clock against published measurements",
        description="Replay published measurements of vLLM, NIM and TensorRT-LLM on real GPUs and "
                    "print, per row: the published figure, servesim's under the same model, GPU "
                    "and workload (units in the unit column), ratio = servesim / published and "
                    "|ln ratio|; per group the median and worst |ln ratio| against the goal.")
    parser.add_argument("--group", default=None, metavar="NAME[,NAME...]",
                        help="only these groups (default every one, some minutes of simulation: "
                             f"{', '.join(group.name for group in GROUPS)})")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.set_defaults(command=run_calibration)


def groups_from_args(text) -> tuple:
    """--group's groups, in GROUPS' order; an unknown name is refused in one line."""
    if text is None:
        return GROUPS
    names = [name.strip() for name in text.split(",")]
    known = {group.name: group for group in GROUPS}
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ConfigError(f"unknown --group {','.join(unknown) or repr(text)}; choose from "
                          f"{', '.join(known)}")
    return tuple(group for group in GROUPS if group.name in names)


def run_calibration(args, context) -> str:
    results = [(group, compare_group(group, context.simulate))
               for group in groups_from_args(args.group)]
    if args.format == "json":
        return json.dumps(to_json(results), indent=2, allow_nan=False)
    return "\n".join(report_lines(results))
