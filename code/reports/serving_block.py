"""One mode in depth: `vllm bench serve`'s "Serving Benchmark Result" block, then servesim's own.

Labels, their order, the widths ("{:<40} {:<10}") and the two-decimal floats follow the block
printed by `benchmark()` in vllm/benchmarks/serve.py (vllm-project/vllm, commit 009e6d4a1cd6),
so that a learner can hold servesim's block next to a real one. servesim prints what vLLM
prints with a tokenizer and a generative model; it leaves out the client-side queueing sections
(`--max-concurrency` runs), because its closed loop stamps a request's arrival when it is sent.
With speculative decoding it prints vLLM's "Speculative Decoding" section after the latencies,
with the labels, order and formats of vLLM 0.30.0's serve.py (which prints it when the server
reports drafts). servesim's own numbers go in one more section before the closing rule.
"""

from metrics import percentile_name

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
# With prefix caching, as vLLM counts it: tokens looked up and found by new requests (a request
# back from preemption, finding its own blocks again, is counted apart).
PREFIX_LINES = [
    ("Prefix cache hit rate (%):", "prefix_cache_hit_rate", "{:<10.2f}"),
    ("Prefix cache hits (tokens):", "prefix_cache_hits", "{:<10}"),
    ("Prefix cache queries (tokens):", "prefix_cache_queries", "{:<10}"),
    ("Resumed requests' hits (tokens):", "prefix_cache_resumed_hits", "{:<10}"),
]
SCHEDULER_LINES = [
    ("Engine steps:", "num_steps", "{:<10}"),
    ("Mean batch size (seqs/step):", "mean_batch_size", "{:<10.2f}"),
    ("Preemptions:", "num_preemptions", "{:<10}"),
    ("Prefill tokens computed:", "prefill_tokens_computed", "{:<10}"),
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
    if "spec_decode_num_drafts" in metrics:
        lines += _speculative_section(metrics)
    lines.append(_rule("Scheduler (servesim)", "-"))
    lines += [f"{label:<40} " + fmt.format(metrics[key]) for label, key, fmt in SCHEDULER_LINES]
    if "prefix_cache_queries" in metrics:  # with prefix caching
        lines += [f"{label:<40} " + fmt.format(metrics[key]) for label, key, fmt in PREFIX_LINES]
    lines.append("=" * RESULT_WIDTH)
    return lines


def _latency_section(metrics: dict, name: str, label: str, title: str,
                     percentiles: list[float]) -> list[str]:
    lines = [_rule(title, "-"),
             _float_line(f"Mean {label} (ms):", metrics[f"mean_{name}_ms"]),
             _float_line(f"Median {label} (ms):", metrics[f"median_{name}_ms"])]
    for p in percentiles:
        key = f"p{percentile_name(p)}_{name}_ms"
        lines.append(_float_line(f"P{percentile_name(p)} {label} (ms):", metrics[key]))
    return lines


def _speculative_section(metrics: dict) -> list[str]:
    """Acceptance rate = accepted / drafted tokens (%); acceptance length = 1 + accepted / drafts
    (the target's own token included); position i = drafts whose first i + 1 tokens were all
    accepted (%)."""
    lines = [_rule("Speculative Decoding", "-"),
             _float_line("Acceptance rate (%):", metrics["spec_decode_acceptance_rate"]),
             _float_line("Acceptance length:", metrics["spec_decode_acceptance_length"]),
             _line("Drafts:", metrics["spec_decode_num_drafts"]),
             _line("Draft tokens:", metrics["spec_decode_draft_tokens"]),
             _line("Accepted tokens:", metrics["spec_decode_accepted_tokens"]),
             "Per-position acceptance (%):"]
    for position, rate in enumerate(metrics["spec_decode_per_position_acceptance_rates"]):
        lines.append(_float_line(f"  Position {position}:", 100 * rate))
    return lines


def _rule(title: str, fill: str) -> str:
    """A section title centred in a 50-character rule: "-----Inter-token Latency-----"."""
    return f"{title:{fill}^{RESULT_WIDTH}}"


def _line(label: str, value) -> str:
    return f"{label:<40} {value:<10}"


def _float_line(label: str, value: float) -> str:
    return f"{label:<40} {value:<10.2f}"
