"""Reading the result: the comparison table, what to read off it, and the JSON.

Every number printed has its unit in its column header; README's "Reading the table" defines
each column. The sentences under the table are computed from the same numbers, never typed in.
"""

import json
import textwrap
from dataclasses import asdict
from typing import Optional


# (JSON key, column header, format): the comparison table, left to right.
COLUMNS = [
    ("output_throughput", "out tok/s", "{:,.0f}"),
    ("mean_ttft_ms", "mean TTFT ms", "{:,.0f}"),
    ("mean_tpot_ms", "mean TPOT ms", "{:,.1f}"),
    ("p99_itl_ms", "P99 ITL ms", "{:,.1f}"),
    ("mean_batch_size", "seqs/step", "{:,.1f}"),
    ("padding_pct", "padding %", "{:.1f}"),
    ("kv_waste_pct", "KV waste %", "{:.1f}"),
    ("num_preemptions", "preempted", "{:,d}"),
]
GOODPUT_COLUMN = ("request_goodput", "goodput req/s", "{:,.2f}")  # with --goodput


def header_lines(config, plan, model_name, gpu_name, workload) -> list[str]:
    tp = f" x{config.tensor_parallel_size} (TP)" if config.tensor_parallel_size > 1 else ""
    return [
        f"servesim: {model_name} on {gpu_name}{tp}, {config.forward_model} clock",
        f"KV cache: {plan.kv_cache_tokens:,} tokens ({plan.num_gpu_blocks:,} blocks of "
        f"{plan.block_size}), max_model_len {config.max_model_len}, "
        f"max_num_seqs {config.max_num_seqs}",
        f"workload: {workload.description}",
    ]


def comparison_table(rows: list[tuple[str, dict]], columns=COLUMNS) -> list[str]:
    """One aligned row per mode: (mode name, metrics)."""
    width = max(len("mode"), *(len(name) for name, _ in rows))
    cells = [[fmt.format(metrics[key]) for key, _, fmt in columns] for _, metrics in rows]
    widths = [max(len(title), *(len(row[i]) for row in cells))
              for i, (_, title, _) in enumerate(columns)]
    lines = ["  ".join(["mode".ljust(width)] + [t.rjust(w) for (_, t, _), w in zip(columns, widths)])]
    for (name, _), row in zip(rows, cells):
        lines.append("  ".join([name.ljust(width)] + [c.rjust(w) for c, w in zip(row, widths)]))
    return lines


def takeaways(results: dict[str, dict], forward_model: str) -> list[str]:
    """What the learner should read off the table, computed from it (modes may be missing).

    A mode whose run took no virtual time has no throughput to compare, so it gets no line:
    a takeaway never prints an infinite ratio.
    """
    results = {name: metrics for name, metrics in results.items()
               if metrics["output_throughput"] > 0}
    lines = []
    naive, static = results.get("NAIVE"), results.get("STATIC")
    continuous, chunked = results.get("CONTINUOUS"), results.get("CONTINUOUS+CHUNKED")
    best = continuous or chunked
    best_name = "CONTINUOUS" if continuous else "CONTINUOUS+CHUNKED"
    if best and static:
        lines.append(
            f"- {best_name} serves {_ratio(best, static, 'output_throughput')} STATIC's output "
            f"tokens/s: STATIC spent {static['padding_pct']:.0f}% of its computed tokens on "
            f"padding and its contiguous KV reservations were {static['kv_waste_pct']:.0f}% "
            f"empty; paged blocks wasted {best['kv_waste_pct']:.1f}%.")
    if naive and (best or static):
        other, other_name = (best, best_name) if best else (static, "STATIC")
        if forward_model == "linear":
            lines.append(
                f"- The linear clock charges every decode token the same whether it runs alone or "
                f"beside {other['mean_batch_size']:.0f} others, so batching buys little: "
                f"{other_name} serves {_ratio(other, naive, 'output_throughput')} NAIVE's output "
                f"tokens/s. That was the lesson toy's clock; the roofline clock knows a decode "
                f"step reads the weights once for the whole batch.")
        else:
            lines.append(
                f"- NAIVE runs one sequence per step, so every step reads all the weights for one "
                f"token; {other_name} shares each read among {other['mean_batch_size']:.0f} "
                f"sequences on average ({_ratio(other, naive, 'output_throughput')} NAIVE's "
                f"output tokens/s).")
    if continuous and chunked:
        whole_ms, chunked_ms = continuous["p99_itl_ms"], chunked["p99_itl_ms"]
        throughput_pct = 100 * _share(chunked, continuous, "output_throughput")
        if chunked_ms < whole_ms:
            lines.append(
                f"- Chunked prefill cut P99 ITL from {whole_ms:,.0f} ms to {chunked_ms:,.0f} ms: a "
                f"whole long prompt stalls every running decode for one long step, a chunk only "
                f"for a short one. Throughput: {throughput_pct:.0f}% of CONTINUOUS's.")
        else:
            lines.append(
                f"- Chunked prefill did not cut P99 ITL here ({whole_ms:,.0f} ms without, "
                f"{chunked_ms:,.0f} ms with): decodes now share steps with prompt chunks, so when "
                f"no prompt is long enough to stall them, their gaps grow. Throughput: "
                f"{throughput_pct:.0f}% of CONTINUOUS's.")
    if best and static:
        lines.append(
            f"- Mean TTFT {static['mean_ttft_ms']:,.0f} ms (STATIC) vs {best['mean_ttft_ms']:,.0f} ms "
            f"({best_name}): a request that arrives while a static batch runs waits for it to "
            f"drain; continuous batching admits it at the next step.")
    return [textwrap.fill(line, width=100, subsequent_indent="  ") for line in lines]


def _share(a: dict, b: dict, key: str) -> float:
    return a[key] / b[key]


def _ratio(a: dict, b: dict, key: str) -> str:
    return f"{_share(a, b, key):.1f}x"


def rejection_lines(recorders) -> list[str]:
    """Requests that could never run, per mode: how many, and the first one's reason."""
    lines = []
    for name, recorder in recorders:
        rejected = recorder.rejections()
        if rejected:
            first = rejected[0]
            lines.append(f"{name}: {len(rejected)} request(s) rejected, e.g. request "
                         f"{first.request_id}: {first.reject_reason}")
    return lines


def to_json(config, plan, workload, results: list[tuple[str, dict]], recorders,
            indent: Optional[int] = 2) -> str:
    """The JSON contract (README, "Machine-readable output"): config, workload, one result per
    mode (plus rejections)."""
    config_json = asdict(config)
    config_json.update(num_gpu_blocks=plan.num_gpu_blocks, kv_cache_tokens=plan.kv_cache_tokens)
    entries = []
    for (name, metrics), (_, recorder) in zip(results, recorders):
        rejections = [{"id": r.request_id, "reason": r.reject_reason}
                      for r in recorder.rejections()]
        entries.append({"mode": name, **metrics, "rejections": rejections})
    document = {"config": config_json, "workload": workload.params, "results": entries}
    return json.dumps(document, indent=indent, allow_nan=False)
