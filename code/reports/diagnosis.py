"""`diagnose`'s page and JSON: the config read, the bottleneck with its counters, the
recommendations served again, vLLM's start-up checks, what to measure next, and with --observed
the deployment against the simulation.

Every figure is from the runs themselves; counters are printed under their JSON names, whose
units the JSON's `evidence_units` and the skill file give (`_pct`: % of the busy time unless the
name says of what; `_ms`; `_tokens`; the rest are counts of requests or events).
"""

import json
import textwrap
from dataclasses import dataclass
from typing import Optional

from reports.columns import aligned

WIDTH = 100


@dataclass
class Diagnosis:
    """What diagnose found, as commands/diagnose.py assembles it."""
    header: list[str]          # model, GPU, KV cache, workload
    sent: list[str]            # workload flags set from --observed, as typed
    baseline: object           # diagnose.Evaluation of the config given
    kept: list                 # tuning.Trial, in order
    rejected: list
    final: object              # the Evaluation after the kept ones
    config_read: list[dict]    # vllm_facts.config_read
    compatibility: list        # vllm_facts.Compatibility
    measure_next: str
    improvement_pct: float     # a recommendation is kept if its metric falls by this much
    vllm_version: str          # the one servesim follows
    observed: Optional[dict] = None
    comparison: Optional[dict] = None  # observed.compare


SUMMARY_NAMES = {"mean_e2el_ms": "mean E2EL ms", "mean_ttft_ms": "mean TTFT ms",
                 "p99_itl_ms": "P99 ITL ms", "mean_tpot_ms": "mean TPOT ms",
                 "output_throughput": "out tok/s", "request_goodput": "goodput req/s"}
WHAT_LIMITS = {"hbm_bound": "the GPU's memory", "kv_starvation": "PagedAttention's block pool",
               "batching_stall": "continuous batching's caps",
               "chunk_missized": "chunked prefill's chunk size",
               "decode_floor": "the weight stream: the hardware's floor",
               "none": "no scheduler default"}


def diagnosis_page(d: Diagnosis) -> list[str]:
    baseline, final = d.baseline, d.final
    lines = list(d.header)
    if d.sent:
        lines.append(f"sent as --observed says: {', '.join(d.sent)}")
    lines += ["", *_config_lines(d.config_read, d.vllm_version), ""]
    lines += _finding_lines(baseline.finding)
    lines += ["", *_recommendation_lines(d.kept, d.rejected, d.improvement_pct,
                                         nothing_to_tune=baseline.finding.metric is None)]
    if d.kept and final.finding.bottleneck != baseline.finding.bottleneck:
        lines.append(_wrap(f"After them: {final.finding.bottleneck} "
                           f"({WHAT_LIMITS[final.finding.bottleneck]}): {final.finding.reason}",
                           indent="  "))
    lines += ["", "Compatibility (what vLLM does at start-up with these flags)"]
    for check in d.compatibility:
        lines.append(_wrap(f"- {check.status}, {check.versions}: {check.flags}. {check.text}",
                           indent="  "))
    if not d.compatibility:
        lines.append(f"- nothing among these flags is refused or warned about, in 0.18.0 or "
                     f"{d.vllm_version}")
    if d.comparison is not None:
        lines += ["", *_observed_lines(d.comparison)]
    lines += ["", _wrap(f"Measure next on the deployment: {d.measure_next}", indent="  ")]
    return lines


def _config_lines(rows: list[dict], version: str) -> list[str]:
    """The flags as a table, "what it sets" wrapped in its own column."""
    marked = [row["value"] + (" *" if row["differs"] else "  ") for row in rows]  # room for *
    table = aligned([("flag", "value  ", "vLLM default")]
                    + [(row["flag"], value, row["vllm_default"]) for row, value in zip(rows, marked)],
                    num_text_columns=3)
    width = max(len(line) for line in table)
    left = width + 2
    lines = [f"Config read (* = not vLLM {version}'s default on this GPU)",
             table[0].ljust(width) + "  what it sets"]
    for row, cells in zip(rows, table[1:]):
        controls = textwrap.wrap(row["controls"], width=WIDTH - left, break_on_hyphens=False)
        lines.append(f"{cells.ljust(width)}  {controls[0]}")
        lines += [" " * left + more for more in controls[1:]]
    for row in rows:
        if row["differs"]:
            lines.append(_wrap(f"* {row['flag']} {row['value']}: {row['if_changed']}",
                               indent="  "))
    return lines


def _finding_lines(finding) -> list[str]:
    lines = [f"Bottleneck: {finding.bottleneck} ({WHAT_LIMITS[finding.bottleneck]})",
             _wrap(finding.reason, first="  ", indent="  ")]
    source = "the memory plan's" if finding.kind == "refused" else "the simulated run's"
    lines.append(f"  counters read ({source}, by their JSON names):")
    return lines + _packed([f"{name} {_number(value)}" for name, value in finding.evidence.items()],
                           indent="    ")


def _packed(items: list[str], indent: str) -> list[str]:
    """Items two spaces apart, as many to a line as fit, none split across lines."""
    lines, line = [], indent
    for item in items:
        if line != indent and len(line) + 2 + len(item) > WIDTH:
            lines.append(line)
            line = indent
        line += item if line == indent else "  " + item
    return lines + [line]


def _recommendation_lines(kept: list, rejected: list, improvement_pct: float,
                          nothing_to_tune: bool) -> list[str]:
    lines = [f"Recommendations (each served again on top of those before it; kept if its metric "
             f"falls {improvement_pct:g}% or more)"]
    if nothing_to_tune:
        lines.append("  none: nothing limits this run, so nothing was tried")
    elif not kept and rejected:
        lines.append("  none: no change tried improved the run enough (below)")
    elif not kept:
        lines.append("  none: servesim has no change left to try for this bottleneck")
    for number, trial in enumerate(kept, start=1):
        lines.append(_wrap(f"{number}. {_trial_text(trial)}", first="  ", indent="     "))
    if rejected:
        lines.append("Tried, not kept:")
        for trial in rejected:
            lines.append(_wrap(f"- {_trial_text(trial)}", first="  ", indent="    "))
    return lines


def _trial_text(trial) -> str:
    flags = " ".join(change.text() for change in trial.changes)
    metric = SUMMARY_NAMES[trial.metric]
    before = "refused at start-up" if trial.before is None else _number(trial.before)
    if trial.after is None:
        return f"{flags} (for {trial.addresses}): {metric} {before} -> refused: {trial.refusal}"
    text = f"{flags} (for {trial.addresses}): {metric} {before} -> {_number(trial.after)}"
    also = [f"{SUMMARY_NAMES[name]} {_number(b)} -> {_number(a)}"
            for name, (b, a) in trial.also.items()]
    return text + (f" (also {', '.join(also)})" if also else "")


def _observed_lines(comparison: dict) -> list[str]:
    lines = ["Observed against the simulation (agree: |ln(observed / simulated)| <= 0.4)"]
    if comparison["figures"]:
        width = max(len(f["metric"]) for f in comparison["figures"])
        lines.append(f"  {'metric'.ljust(width)}  {'observed':>10}  {'simulated':>10}  ratio  "
                     "agrees")
        for f in comparison["figures"]:
            lines.append(f"  {f['metric'].ljust(width)}  {_number(f['observed']):>10}  "
                         f"{_number(f['simulated']):>10}  {f['ratio']:5.2f}  "
                         f"{'yes' if f['agrees'] else 'no'}")
    for note in comparison["notes"]:
        lines.append(_wrap(f"- {note}", first="  ", indent="    "))
    lines.append(f"  observed_matches: {'true' if comparison['matches'] else 'false'}")
    return lines


def diagnosis_json(d: Diagnosis) -> str:
    baseline, final = d.baseline, d.final
    document = {
        **baseline.finding.as_json(),
        "recommendations": [trial.as_json() for trial in d.kept],
        "tried": [trial.as_json() for trial in d.rejected],
        "after_recommendations": {"bottleneck": final.finding.bottleneck,
                                  "reason": final.finding.reason},
        "config_read": d.config_read,
        "compatibility": [check.as_json() for check in d.compatibility],
        "measure_next": d.measure_next,
        "simulated": baseline.summary,
    }
    if d.comparison is not None:
        document.update(observed=d.observed, sent_from_observed=d.sent,
                        comparison=d.comparison["figures"],
                        observed_notes=d.comparison["notes"],
                        observed_matches=d.comparison["matches"])
    return json.dumps(document, indent=2)


def _number(value) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def _wrap(text: str, first: str = "", indent: str = "  ") -> str:
    return textwrap.fill(text, width=WIDTH, initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False)  # a flag's name stays whole
