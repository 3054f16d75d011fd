"""Each replica's own figures under the cluster's result block (--data-parallel-size, --pd).

    replica  role      requests  output tok/s  busy %  mean KV %  peak KV %  prefix hit %  preempted
          0  both           100        812.40    97.1       31.2       55.0          0.00          0

requests = sent to it; output tok/s = output tokens of the requests it finished / the run's
duration; busy % = its steps' time / the duration; KV % = its reserved KV slots of its own pool
(mean over its steps, and the most at once); prefix hit % = vLLM's hit rate over the new
requests it admitted; preempted = its preemption events. With --pd, the split of a request's
time: prefill side (arrival to its prompt's last token), waiting for decode blocks, the KV on
the wire, decode side (the KV landed to the last token), as means over requests.
"""

HEADER = ("replica", "role", "requests", "output tok/s", "busy %", "mean KV %", "peak KV %",
          "prefix hit %", "preempted")


def replica_lines(metrics: dict) -> list[str]:
    replicas = metrics.get("replicas")
    if not replicas:
        return []
    widths = [max(len(title), 8) for title in HEADER]
    lines = ["", "  ".join(title.rjust(width) for title, width in zip(HEADER, widths))]
    for r in replicas:
        cells = (str(r["replica"]), r["role"], str(r["requests"]), f"{r['output_throughput']:.2f}",
                 f"{r['busy_pct']:.1f}", f"{r['mean_kv_usage_pct']:.1f}",
                 f"{r['peak_kv_usage_pct']:.1f}", f"{r['prefix_cache_hit_rate']:.2f}",
                 str(r["num_preemptions"]))
        lines.append("  ".join(cell.rjust(width) for cell, width in zip(cells, widths)))
    split = metrics.get("disaggregation")
    if split:
        lines += ["", "Prefill/decode split (mean per request, ms): "
                  f"prefill side {split['mean_prefill_side_ms']:.2f}, waiting for decode blocks "
                  f"{split['mean_kv_transfer_wait_ms']:.2f}, KV transfer "
                  f"{split['mean_kv_transfer_ms']:.2f}, decode side "
                  f"{split['mean_decode_side_ms']:.2f}; KV moved "
                  f"{split['kv_transferred_gb']:.2f} GB"]
    return lines
