"""`run --html FILE`: the run's steps in one self-contained page, to step through in a browser;
`run --explain STEP` and `--explain-request ID`: the same sentences in the terminal.

The page (step_page.html beside this file: inline CSS and JavaScript, no network, no fonts to
fetch) carries the recorded steps (step_record.py) as compact JSON and redraws any step from
them: RUNNING and WAITING, the token budget as the step spent it, the block pool, the selected
request's block table, and every decision with its rule. It replays the steps from the window's
start, as the engine ran them, so it holds what changed in each step, not each step's whole
state. The data is limited to PAGE_LIMIT_BYTES (about 10,000 steps of a busy run); a run whose
steps need more is refused in one line, pointing to a window of them (`--html-steps A:B`).
"""

import html
import json
import os
from typing import Optional

from config import ConfigError
from reports.reasons import RULES, VLLM_SOURCE, Reason
from reports.step_record import PageTooLarge, StepRecord, StepRecorder

PAGE_LIMIT_BYTES = 5_000_000  # of step data: a page of a few MB opens in a second or two
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_page.html")
RULE_NAMES = list(RULES)


def parse_steps_window(text: str) -> tuple[int, Optional[int]]:
    """`A:B` -> steps A up to B (B not included), as a Python slice; `A:` runs to the end."""
    first, colon, stop = text.partition(":")
    try:
        first_step = int(first) if first else 0
        stop_step = int(stop) if stop else None
    except ValueError:
        first_step, stop_step = -1, None
    if not colon or first_step < 0 or (stop_step is not None and stop_step <= first_step):
        raise ConfigError(f"--html-steps {text!r}: give A:B, steps A up to (not including) B, "
                          "with 0 <= A < B, e.g. 0:500; or A: for step A to the end")
    return first_step, stop_step


class PageBudget:
    """Counts the bytes each record adds to the page; refuses the run past PAGE_LIMIT_BYTES."""

    def __init__(self, limit_bytes: Optional[int] = None):
        self.limit_bytes = PAGE_LIMIT_BYTES if limit_bytes is None else limit_bytes
        self.num_bytes = 0

    def __call__(self, recorder: StepRecorder, record: StepRecord) -> None:
        self.num_bytes += len(json.dumps(encode_step(record, _Index(recorder)))) + 1
        if self.num_bytes > self.limit_bytes:
            first = recorder.first_step
            fits = max(record.index - first, 1)
            raise PageTooLarge(
                f"--html: steps {first} to {record.index} already fill the page's "
                f"{self.limit_bytes:,} bytes of step data and the run goes on; draw a "
                f"window of at most about {fits:,} steps with --html-steps A:B, e.g. "
                f"--html-steps {first}:{first + fits}")


class _Index:
    """Request ids -> their places in the page's request list (for counting bytes)."""

    def __init__(self, recorder: StepRecorder):
        self.places = {request_id: place for place, request_id in enumerate(recorder.requests)}

    def __getitem__(self, request_id: str) -> int:
        return self.places[request_id]


def encode_step(record: StepRecord, index) -> list:
    """One step as the page reads it (step_page.html's `stepOf` names the fields)."""
    cost = [round(part * 1e6) for part in record.cost_s] if record.cost_s else 0
    scheduled = [index[rid] if rid in record.plain_decodes else [index[rid], tokens, drafts]
                 for rid, tokens, drafts in record.scheduled]
    decisions = [[index[r.request_id], RULE_NAMES.index(r.rule), *r.values]
                 for r in record.decisions
                 if not (r.rule == "decode" and r.request_id in record.plain_decodes)]
    return [round(record.start_s * 1e6), round(record.step_s * 1e6), cost, scheduled,
            [index[rid] for rid in record.arrived], [index[rid] for rid in record.admitted],
            [index[rid] for rid in record.preempted], [index[rid] for rid in record.finished],
            record.num_free_blocks, decisions,
            [[index[r.request_id], RULE_NAMES.index(r.rule), *r.values] for r in record.events],
            [[index[s.request_id], s.num_computed_tokens, s.num_tokens] for s in record.changed],
            [[index[rid], *blocks] for rid, blocks in record.new_blocks], record.cached_free,
            _us(record.mean_ttft_s), _us(record.mean_itl_s), record.num_completed]


def _us(seconds: Optional[float]):
    return None if seconds is None else round(seconds * 1e6)


def page_data(recorder: StepRecorder, title_lines: list[str]) -> dict:
    """Everything the page shows, as JSON-ready data."""
    if not recorder.records:
        raise ConfigError(f"--html-steps: {recorder.name} ran {recorder.num_steps} steps (0 to "
                          f"{recorder.num_steps - 1}), none in the window asked for")
    places = {request_id: place for place, request_id in enumerate(recorder.requests)}
    start = recorder.start
    scheduler = recorder.scheduler
    return {
        "title": title_lines,
        "mode": recorder.name,
        "config": {
            "max_num_batched_tokens": scheduler.max_num_batched_tokens,
            "max_num_seqs": scheduler.max_num_seqs,
            "block_size": scheduler.kv_cache.block_size,
            "num_blocks": recorder.num_blocks,
            "draft_slots": scheduler.speculation.num_draft_slots,
            "enable_prefix_caching": scheduler.kv_cache.enable_prefix_caching,
            "enable_chunked_prefill": scheduler.enable_chunked_prefill,
            "long_prefill_token_threshold": scheduler.long_prefill_token_threshold,
            "num_speculative_tokens": scheduler.speculation.num_speculative_tokens,
        },
        "rules": [[name, rule.template, rule.vllm, VLLM_SOURCE + rule.source]
                  for name, rule in RULES.items()],
        "requests": [[info.request_id, info.prompt_len, info.max_tokens,
                      round(info.arrival_s * 1e6)] for info in recorder.requests.values()],
        "start": {
            "running": [[places[s.request_id], s.num_computed_tokens, s.num_tokens]
                        for s in start.running],
            "waiting": [[places[s.request_id], s.num_computed_tokens, s.num_tokens]
                        for s in start.waiting],
            "tables": [[places[rid], *table] for rid, table in start.tables.items()],
            "cached": start.cached_free,
        },
        "first_step": recorder.first_step,
        "num_steps": recorder.num_steps,
        "steps": [encode_step(record, places) for record in recorder.records],
    }


def render_page(data: dict) -> str:
    """The page: the template with the data in (`</` escaped, so no string ends the script)."""
    with open(TEMPLATE, encoding="utf-8") as file:
        template = file.read()
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return template.replace("/*STEP_DATA*/null", payload)


SIDE_BY_SIDE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>servesim: the modes side by side, step by step</title>
<!-- Written by servesim (code/reports/step_page.py). Self-contained: no network, no fonts. -->
<style>
body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: #1d2430; background: #fbfbfc; }
header { padding: 10px 16px; border-bottom: 1px solid #d9dee5; background: #fff; }
h1 { font-size: 17px; margin: 0; } #title { color: #5f6b7a; font-size: 12px; white-space: pre-wrap; }
nav { display: flex; gap: 6px; align-items: center; padding: 8px 16px; background: #f1f4f8; }
button { font: inherit; padding: 3px 10px; border: 1px solid #b8c2cf; border-radius: 6px; background: #fff; }
#scrub { flex: 1; } .panes { display: flex; gap: 8px; padding: 8px; }
.pane { flex: 1; min-width: 0; } .pane h2 { font-size: 13px; margin: 4px 6px; }
iframe { width: 100%; height: 2400px; border: 1px solid #d9dee5; border-radius: 8px; background: #fff; }
</style>
</head>
<body>
<header><h1>The modes side by side, step by step</h1><div id="title"></div></header>
<nav><button id="back">&#9664; step</button><button id="fwd">step &#9654;</button>
<input id="scrub" type="range" min="0" value="0" aria-label="step">
<span>step <b id="step-index">0</b> in every mode (each pane also steps on its own)</span></nav>
<div class="panes">/*PANES*/</div>
<script>
"use strict";
const TITLE = /*TITLE*/null, LAST = /*LAST*/0;
const frames = [...document.querySelectorAll("iframe")];
let step = 0;
function show(k) {
  step = Math.max(0, Math.min(LAST, k));
  document.getElementById("step-index").textContent = step;
  document.getElementById("scrub").value = step;
  for (const frame of frames) frame.contentWindow.postMessage({ step }, "*");
  history.replaceState(null, "", "#step=" + step);
}
document.getElementById("title").textContent = TITLE.join("\\n");
document.getElementById("scrub").max = LAST;
document.getElementById("back").onclick = () => show(step - 1);
document.getElementById("fwd").onclick = () => show(step + 1);
document.getElementById("scrub").oninput = e => show(Number(e.target.value));
document.addEventListener("keydown", e => {
  if (e.key === "ArrowRight") show(step + 1);
  if (e.key === "ArrowLeft") show(step - 1);
});
const wanted = new URLSearchParams(location.hash.slice(1)).get("step");
window.addEventListener("load", () => show(wanted === null ? 0 : Number(wanted)));
</script>
</body>
</html>
"""


def render_side_by_side(title_lines: list[str], pages: list[tuple[str, str, int]]) -> str:
    """compare --html: each mode's page (name, page, its last step) in a pane of one page,
    stepped together (each page is whole inside its pane: `srcdoc`, nothing fetched)."""
    panes = "".join(f'<div class="pane"><h2>{html.escape(name)}</h2><iframe title='
                    f'"{html.escape(name)}" srcdoc="{html.escape(page, quote=True)}"></iframe>'
                    "</div>" for name, page, _ in pages)
    last = max(last_step for _, _, last_step in pages)
    return (SIDE_BY_SIDE.replace("/*PANES*/", panes)
            .replace("/*TITLE*/null", json.dumps(title_lines).replace("</", "<\\/"))
            .replace("/*LAST*/0", str(last)))


# -- the terminal ----------------------------------------------------------------------------------

def decisions_in_order(record: StepRecord, running_before: list[str]) -> list[Reason]:
    """Every request the step's schedule looked at, once: RUNNING as the step found it, then
    those admitted, then WAITING's head and everybody behind it (the page shows this order)."""
    by_request = {reason.request_id: reason for reason in record.decisions}
    order = [*running_before, *record.admitted]
    victims = set(record.preempted)
    waiting = [rid for rid in record.waiting_after if rid not in victims]
    reasons = [by_request[rid] for rid in order if rid in by_request]
    if waiting and waiting[0] in by_request:
        head = waiting[0]
        reasons.append(by_request[head])
        reasons += [Reason(rid, "wait_behind", {"request": head}) for rid in waiting[1:]]
    return reasons


def explain_lines(record: StepRecord, request_id: Optional[str] = None) -> list[str]:
    """The step's sentences, one a request (its events under it); only `request_id`'s if given.
    The record must have kept its queues (StepRecorder's `keep_queues`)."""
    reasons = decisions_in_order(record, record.running_before)
    events: dict[str, list[Reason]] = {}
    for event in record.events:
        events.setdefault(event.request_id, []).append(event)
    lines = []
    shown = set()
    for reason in reasons:
        shown.add(reason.request_id)
        lines += _request_lines(reason, events.get(reason.request_id, []))
    for rid, extra in events.items():
        if rid not in shown:
            lines += _request_lines(None, extra)
    if request_id is not None:
        lines = [line for line in lines if line.startswith(f"  request {request_id}:")]
    return lines


def _request_lines(reason: Optional[Reason], events: list[Reason]) -> list[str]:
    lines = []
    for item in ([reason] if reason else []) + events:
        rule = RULES[item.rule]
        lines.append(f"  request {item.request_id}: {item.sentence}  [{rule.vllm}]")
    return lines


def step_header(record: StepRecord) -> str:
    num_tokens = sum(tokens for _, tokens, _ in record.scheduled)
    return (f"step {record.index} at {record.start_s:.6f} s ({record.step_s * 1000:.3f} ms): "
            f"{len(record.scheduled)} requests scheduled for {num_tokens} tokens; after it "
            f"{record.num_running} running, {record.num_waiting} waiting, "
            f"{record.num_free_blocks} free blocks")
