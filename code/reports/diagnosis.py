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
    assumed: list[str]         # engine flags left out, at vLLM's defaults for the GPU, as typed
    num_requests: int          # the workload's requests
    observed_meets_slo: Optional[bool]  # --observed: the deployment met the SLO (None: unknown)
    baseline: object           # diagnose.Evaluation of the config given
    kept: list                 # tuning.Trial, in order
    rejected: list
    final: object              # the Evaluation after the kept ones
    hardware: list             # tuning.Trial: the more-GPU options served side by side
    num_runs: int              # simulations served, the config given included
    config_read: list[dict]    # vllm_facts.config_read
    compatibility: list        # vllm_facts.Compatibility
    measure_next: str
    improvement_pct: float     # at equal goodput, a change is kept if its metric falls this much
    vllm_version: str          # the one servesim follows
    observed: Optional[dict] = None
    comparison: Optional[dict] = None  # observed.compare
    warm: Optional[object] = None      # diagnose.WarmRun: served again, the prefix cache warm


SUMMARY_NAMES = {"mean_e2el_ms": "mean E2EL ms", "mean_ttft_ms": "mean TTFT ms",
                 "p99_itl_ms": "P99 ITL ms", "mean_tpot_ms": "mean TPOT ms",
                 "output_throughput": "out tok/s", "request_goodput": "goodput req/s",
                 "good_requests": "requests meeting every SLO"}
WHAT_LIMITS = {"hbm_bound": "the GPU's memory", "kv_starvation": "PagedAttention's block pool",
               "batching_stall": "continuous batching's caps",
               "chunk_missized": "chunked prefill's chunk size",
               "decode_floor": "the weight stream: the hardware's floor",
               "none": "no scheduler default",
               "hand_set_pool": "a pool set by hand (--num-gpu-blocks-override)",
               "prefix_cache_off": "prefix caching, left off",
               "speculation_overhead": "speculative decoding's compute at this load"}


def diagnosis_page(d: Diagnosis) -> list[str]:
    baseline, final = d.baseline, d.final
    lines = list(d.header)
    if d.sent:
        lines.append(f"sent as --observed says: {', '.join(d.sent)}")
    if d.assumed:
        lines.append(_wrap(f"left out, so at vLLM {d.vllm_version}'s defaults for this GPU: "
                           f"{', '.join(d.assumed)}"))
    lines += ["", *_config_lines(d.config_read, d.vllm_version), ""]
    lines += _finding_lines(baseline.finding)
    if d.warm is not None and d.warm.tuned:
        warm = d.warm.baseline.finding
        lines += ["", _wrap(f"The observation matches the run with the prefix cache warm "
                            f"better (below): there the bottleneck is {warm.bottleneck} "
                            f"({WHAT_LIMITS[warm.bottleneck]}): {warm.reason}. The "
                            f"recommendations tune that run.", indent="  ")]
    lines += ["", *_recommendation_lines(d)]
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
    if d.warm is not None:
        lines += ["", *_warm_lines(d.warm)]
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


def _recommendation_lines(d: Diagnosis) -> list[str]:
    if d.observed_meets_slo:
        return ["Recommendations: none. The deployment as observed meets the SLO (its "
                "goodput, or its P99s, within every target), so nothing is tuned; the "
                "simulation's counters above say what would limit it first as the load grows."]
    lines = [_wrap(f"Recommendations ({d.num_runs} simulations; a change is served on top of "
                   f"those kept before it and kept if more requests meet every SLO, or, at "
                   f"equal goodput, if the bottleneck's metric falls {d.improvement_pct:g}% or "
                   f"more with no headline metric {WORSENING}% worse)")]
    if not d.kept:
        lines.append("  none: no change tried raised goodput or, at equal goodput, helped "
                     "enough (below)" if d.rejected else "  none: servesim had no change to try")
    for number, trial in enumerate(d.kept, start=1):
        lines.append(_wrap(f"{number}. {_trial_text(trial, every_figure=True)}", first="  ",
                           indent="     "))
    if d.hardware:
        lines += ["More GPUs or bigger ones, side by side (tried: the SLO was still missed):",
                  *_hardware_table(d.hardware)]
    if d.rejected:
        lines.append("Tried, not kept:")
        for trial in d.rejected:
            lines.append(_wrap(f"- {_trial_text(trial, every_figure=False)}", first="  ",
                               indent="    "))
    return lines


WORSENING = 10  # tuning.WORSENING_PCT, as the page says it


def _trial_text(trial, every_figure: bool) -> str:
    """The change, why it was (not) kept, and its figures before -> after: every headline
    metric for a kept change, goodput and the bottleneck's metric for the others."""
    flags = " ".join(change.text() for change in trial.changes)
    gpus = (f" [{trial.num_gpus[0]} -> {trial.num_gpus[1]} GPUs]"
            if trial.num_gpus[0] != trial.num_gpus[1] else "")
    if trial.after is None:
        return f"{flags}{gpus}: refused: {trial.refusal}"
    shown = trial.also if every_figure else {
        name: pair for name, pair in trial.also.items()
        if name in ("good_requests", trial.metric)}
    figures = [f"{SUMMARY_NAMES[name]} {_number(b)} -> {_number(a)}" for name, (b, a) in
               shown.items()]
    caveats = [change.caveat for change in trial.changes if change.caveat] if every_figure else []
    return (f"{flags}{gpus}: {trial.why}" + (f" ({', '.join(figures)})" if figures else "")
            + "".join(f". Caveat: {caveat}" for caveat in caveats))


def _hardware_table(trials: list) -> list[str]:
    rows = [("option", "GPUs", "met SLO", "goodput req/s", "per GPU", "mean TTFT ms",
             "mean TPOT ms", "kept")]
    for trial in trials:
        flags = " ".join(change.text() for change in trial.changes)
        if trial.after is None:
            rows.append((flags, str(trial.num_gpus[1]), "refused", "", "", "", "", "no"))
            continue
        goodput = trial.also["request_goodput"][1]
        rows.append((flags, str(trial.num_gpus[1]), _number(trial.also["good_requests"][1]),
                     _number(goodput), _number(goodput / trial.num_gpus[1]),
                     _number(trial.also["mean_ttft_ms"][1]),
                     _number(trial.also["mean_tpot_ms"][1]), "yes" if trial.kept else "no"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                             for i, (cell, width) in enumerate(zip(row, widths)))
            for row in rows]


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


def _warm_lines(warm) -> list[str]:
    """The same comparison against the run whose prefix cache was warm, and its bottleneck."""
    finding = warm.baseline.finding
    tuned = ("this run" if warm.tuned
             else "the cold run above, which the observation matches better")
    return [_wrap("Served again with the prefix cache warm (each prompt computed once before, "
                  "as the run before a re-sent vllm bench serve leaves it), against the same "
                  "observation"),
            *_observed_lines(warm.comparison)[1:],
            _wrap(f"bottleneck with the cache warm: {finding.bottleneck} "
                  f"({WHAT_LIMITS[finding.bottleneck]}); the recommendations tune {tuned}",
                  first="  ", indent="    ")]


def diagnosis_json(d: Diagnosis) -> str:
    baseline, final = d.baseline, d.final
    document = {
        **baseline.finding.as_json(),
        "recommendations": [trial.as_json() for trial in d.kept],
        "tried": [trial.as_json() for trial in d.rejected],
        "more_gpus": [trial.as_json() for trial in d.hardware],
        "num_simulations": d.num_runs,
        "num_requests": d.num_requests,
        "observed_meets_slo": d.observed_meets_slo,
        "after_recommendations": {"bottleneck": final.finding.bottleneck,
                                  "reason": final.finding.reason},
        "config_read": d.config_read,
        "assumed_vllm_defaults": d.assumed,
        "compatibility": [check.as_json() for check in d.compatibility],
        "measure_next": d.measure_next,
        "simulated": baseline.summary,
    }
    if d.comparison is not None:
        document.update(observed=d.observed, sent_from_observed=d.sent,
                        comparison=d.comparison["figures"],
                        observed_notes=d.comparison["notes"],
                        observed_matches=d.comparison["matches"])
    if d.warm is not None:
        document["warm_prefix_cache"] = {
            "bottleneck": d.warm.baseline.finding.bottleneck,
            "reason": d.warm.baseline.finding.reason, "tuned": d.warm.tuned,
            "comparison": d.warm.comparison["figures"],
            "observed_matches": d.warm.comparison["matches"],
            "simulated": d.warm.baseline.summary}
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
