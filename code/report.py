"""Reading the result: the comparison table, what to read off it, vLLM's result block, the JSON.

Every number printed has its unit in its column header; README's "Reading the table" defines
each column. The sentences under the table are computed from the same numbers, never typed in.
"""

import json
import textwrap
import math
from dataclasses import asdict
from typing import Optional

from config import ConfigError
from metrics import percentile_name

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
    """What the learner should read off the table, computed from it (modes may be missing)."""
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
    return a[key] / b[key] if b[key] else float("inf")


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
    """DESIGN.md's JSON contract: config, workload, one result per mode (plus rejections)."""
    config_json = asdict(config)
    config_json.update(num_gpu_blocks=plan.num_gpu_blocks, kv_cache_tokens=plan.kv_cache_tokens)
    entries = []
    for (name, metrics), (_, recorder) in zip(results, recorders):
        rejections = [{"id": r.request_id, "reason": r.reject_reason}
                      for r in recorder.rejections()]
        entries.append({"mode": name, **metrics, "rejections": rejections})
    document = {"config": config_json, "workload": workload.params, "results": entries}
    return json.dumps(document, indent=indent)


# -- one mode in depth: `vllm bench serve`'s "Serving Benchmark Result" block ------------------
#
# Labels, their order, the widths ("{:<40} {:<10}") and the two-decimal floats follow the block
# printed by `benchmark()` in vllm/benchmarks/serve.py (vllm-project/vllm, commit 009e6d4a1cd6),
# so that a learner can hold servesim's block next to a real one. servesim prints what vLLM
# prints with a tokenizer and a generative model; it leaves out the client-side queueing sections
# (`--max-concurrency` runs), because its closed loop stamps a request's arrival when it is sent.
# Its own numbers go in one more section before the closing rule, where vLLM puts its
# speculative-decoding section.

RESULT_WIDTH = 50
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")  # the sections --percentile-metrics picks
# (JSON metric name, label name, section title), in vLLM's order.
LATENCY_SECTIONS = [
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
]
# (label, JSON key, format): what the scheduler did, servesim's own section.
SCHEDULER_LINES = [
    ("Engine steps:", "num_steps", "{:<10}"),
    ("Mean batch size (seqs/step):", "mean_batch_size", "{:<10.2f}"),
    ("Preemptions:", "num_preemptions", "{:<10}"),
    ("Padding (% of computed tokens):", "padding_pct", "{:<10.2f}"),
    ("KV waste (% of reserved, time-avg):", "kv_waste_pct", "{:<10.2f}"),
    ("Peak KV use (% of KV cache):", "peak_kv_usage_pct", "{:<10.2f}"),
]


def serving_result_block(metrics: dict, percentiles: list[float], percentile_metrics: list[str],
                         traffic: dict) -> list[str]:
    """The block for one run. `metrics` comes from metrics.serving_metrics; `traffic` holds
    the workload's `max_concurrency` and `request_rate` (absent or None when not set)."""
    lines = [_rule(" Serving Benchmark Result ", "=")]
    lines.append(_line("Successful requests:", metrics["completed"]))
    lines.append(_line("Failed requests:", metrics["rejected"]))
    if traffic.get("max_concurrency") is not None:
        lines.append(_line("Maximum request concurrency:", traffic["max_concurrency"]))
    request_rate = traffic.get("request_rate")  # JSON-safe: "inf" for all at once, as vLLM writes
    if request_rate not in (None, "inf"):
        lines.append(_float_line("Request rate configured (RPS):", request_rate))
    lines.append(_float_line("Benchmark duration (s):", metrics["duration"]))
    lines.append(_line("Total input tokens:", metrics["total_input_tokens"]))
    lines.append(_line("Total generated tokens:", metrics["total_output_tokens"]))
    lines.append(_float_line("Request throughput (req/s):", metrics["request_throughput"]))
    if "request_goodput" in metrics:
        lines.append(_float_line("Request goodput (req/s):", metrics["request_goodput"]))
    lines.append(_float_line("Output token throughput (tok/s):", metrics["output_throughput"]))
    lines.append(_float_line("Peak output token throughput (tok/s):",
                             metrics["max_output_tokens_per_s"]))
    lines.append(_float_line("Peak concurrent requests:", metrics["max_concurrent_requests"]))
    lines.append(_float_line("Total token throughput (tok/s):", metrics["total_token_throughput"]))
    for name, label, title in LATENCY_SECTIONS:
        if name in percentile_metrics:
            lines += _latency_section(metrics, name, label, title, percentiles)
    lines.append(_rule("Scheduler (servesim)", "-"))
    lines += [f"{label:<40} " + fmt.format(metrics[key]) for label, key, fmt in SCHEDULER_LINES]
    lines.append("=" * RESULT_WIDTH)
    return lines


def parse_percentiles(text: str) -> list[float]:
    """--metric-percentiles "50,90,99" -> [50.0, 90.0, 99.0]."""
    percentiles = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 100:
            raise ConfigError("--metric-percentiles takes a comma list of numbers in [0, 100], "
                              f"e.g. 50,90,99; got {item!r}")
        percentiles.append(value)
    return percentiles


def parse_percentile_metrics(text: str) -> list[str]:
    """--percentile-metrics "ttft,itl" -> ["ttft", "itl"] (printed in vLLM's order anyway)."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in PERCENTILE_METRICS]
    if unknown:
        raise ConfigError(f"--percentile-metrics: unknown {','.join(unknown)!r}; choose from "
                          f"{','.join(PERCENTILE_METRICS)}")
    return names


def _latency_section(metrics: dict, name: str, label: str, title: str,
                     percentiles: list[float]) -> list[str]:
    lines = [_rule(title, "-"),
             _float_line(f"Mean {label} (ms):", metrics[f"mean_{name}_ms"]),
             _float_line(f"Median {label} (ms):", metrics[f"median_{name}_ms"])]
    for p in percentiles:
        key = f"p{percentile_name(p)}_{name}_ms"
        lines.append(_float_line(f"P{percentile_name(p)} {label} (ms):", metrics[key]))
    return lines


def _rule(title: str, fill: str) -> str:
    """A section title centred in a 50-character rule: "-----Inter-token Latency-----"."""
    return f"{title:{fill}^{RESULT_WIDTH}}"


def _line(label: str, value) -> str:
    return f"{label:<40} {value:<10}"


def _float_line(label: str, value: float) -> str:
    return f"{label:<40} {value:<10.2f}"


def presets_tables() -> list[str]:
    """`python code/main.py presets`: every GPU and model, with the figures derived from them."""
    from presets import GPUS, MODELS  # only this command needs them
    gib = 2**30
    lines = ["GPUs (dense tensor-core peaks; memory as torch reports it)"]
    rows = [("key", "name", "memory GiB", "bandwidth GB/s", "BF16 TFLOP/s", "FP8 TFLOP/s",
             "GPU link GB/s")]
    for key, gpu in GPUS.items():
        fp8 = "-" if gpu.fp8_tflops is None else f"{gpu.fp8_tflops:,.1f}"
        rows.append((key, gpu.name, f"{gpu.memory_gib:.2f}", f"{gpu.memory_bandwidth_gbs:,.0f}",
                     f"{gpu.bf16_tflops:,.1f}", fp8, f"{gpu.interconnect_gbs:,.0f}"))
    lines += _aligned(rows, num_text_columns=2)
    lines += ["", "Models (from each checkpoint's config.json; KV bytes per token = layers x 2 x "
                  "kv_heads x head_dim x bytes)"]
    rows = [("key", "layers", "hidden", "heads/kv", "params B", "weights", "weights GiB",
             "KV B/token 16-bit", "KV B/token fp8")]
    for key, model in MODELS.items():
        rows.append((key, str(model.num_layers), f"{model.hidden_size:,}",
                     f"{model.num_heads}/{model.num_kv_heads}", f"{model.num_params / 1e9:.2f}",
                     model.weight_dtype, f"{model.weight_bytes / gib:.2f}",
                     f"{model.kv_bytes_per_token('auto'):,}", f"{model.kv_bytes_per_token('fp8'):,}"))
    lines += _aligned(rows, num_text_columns=1)
    lines += ["", "Sources"]
    for key, preset in [*GPUS.items(), *MODELS.items()]:
        lines.append(textwrap.fill(f"{key}: {preset.source}", width=100, subsequent_indent="    ",
                                   break_on_hyphens=False))
    return lines


def _aligned(rows: list[tuple], num_text_columns: int) -> list[str]:
    """Left-align the first columns (names), right-align the rest (numbers)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(w) if i < num_text_columns else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines
