"""Reading the result: the comparison table, what to read off it, and the JSON.

Every number printed has its unit in its column header; README's "Reading the table" defines
each column. The sentences under the table are computed from the same numbers, never typed in.
"""

import json
import textwrap
from dataclasses import asdict
from typing import Optional

from goodput import describe_slo


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
    if config.data_parallel_size > 1:
        tp = (f" x{config.tensor_parallel_size * config.data_parallel_size} (TP "
              f"{config.tensor_parallel_size} x DP {config.data_parallel_size} attention ranks)")
    if config.enable_expert_parallel:
        tp += ", experts spread over every GPU (EP)"
    lines = [
        f"servesim: {model_name} on {gpu_name}{tp}, {config.forward_model} clock",
        f"KV cache: {plan.kv_cache_tokens:,} tokens ({plan.num_gpu_blocks:,} blocks of "
        f"{plan.block_size}), max_model_len {config.max_model_len}, "
        f"max_num_seqs {config.max_num_seqs}",
        memory_line(config, plan),
        f"workload: {workload.description}",
    ]
    if config.speculative_config is not None:
        lines += textwrap.wrap(config.speculative_config.describe(), width=100,
                               subsequent_indent="  ")
    return lines


def memory_line(config, plan) -> str:
    """The memory split vLLM makes on each GPU (gpu_memory.py): what --gpu-memory-utilization
    hands out goes to the weights first, then the activation reserve, and the rest to KV blocks
    (less than one block's worth is left over)."""
    gib = 2**30
    kv = ("KV cache set by --num-gpu-blocks-override" if plan.overridden else "KV cache")
    return (f"memory per GPU (GiB): {plan.usable_bytes / gib:,.1f} usable at "
            f"--gpu-memory-utilization {config.gpu_memory_utilization:g} = "
            f"{plan.weight_bytes / gib:,.1f} weights + {plan.activation_reserve_bytes / gib:,.1f} "
            f"activation reserve + {plan.kv_cache_bytes / gib:,.1f} {kv}")


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


def takeaways(results: dict[str, dict], forward_model: str, chunked_budget: int,
              slos_ms: Optional[dict] = None) -> list[str]:
    """What the learner should read off the table, computed from it (modes may be missing);
    `chunked_budget`, CONTINUOUS+CHUNKED's token budget per step; `slos_ms`, the goodput SLOs
    the results were judged by.

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
    if static:
        lines.append(static_loss_line(static))
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
        lines.append(chunked_itl_line(continuous, chunked, chunked_budget))
        if slos_ms:
            lines.append(goodput_line(continuous, chunked, slos_ms))
    if best and static:
        lines.append(
            f"- Mean TTFT {static['mean_ttft_ms']:,.0f} ms (STATIC) vs {best['mean_ttft_ms']:,.0f} ms "
            f"({best_name}); {static['mean_queue_ms']:,.0f} ms of STATIC's is queueing: a request "
            f"that arrives while a static batch runs waits for it to drain; continuous batching "
            f"admits it at the next step (queue {best['mean_queue_ms']:,.0f} ms).")
    return wrapped(lines + surprise_lines(results))


def chunked_itl_line(continuous: dict, chunked: dict, budget: int) -> str:
    """What chunked prefill did to P99 ITL, and the cause that held, read off the counters: how
    many prompts were sliced, the budget against the longest prompt, and how many decode tokens
    shared a step with prompt tokens."""
    whole_ms, chunked_ms = continuous["p99_itl_ms"], chunked["p99_itl_ms"]
    longest, sliced = chunked["longest_prompt_len"], chunked["num_sliced_prompts"]
    verb = "cut P99 ITL" if chunked_ms < whole_ms else "did not cut P99 ITL"
    head = f"- Chunked prefill {verb} ({whole_ms:,.0f} ms without, {chunked_ms:,.0f} ms with): "
    beside = (f"{chunked['decodes_beside_prompts_pct']:.0f}% of its decode tokens shared a step "
              f"with prompt tokens, {continuous['decodes_beside_prompts_pct']:.0f}% of "
              f"CONTINUOUS's")
    if sliced == 0:
        cause = (f"nothing was sliced: every prompt fit the {budget:,}-token budget where it was "
                 f"admitted, so both modes ran whole prompts")
    elif budget >= longest:
        cause = (f"the {budget:,}-token budget holds the longest prompt ({longest:,} tokens) "
                 f"whole, so chunking shortened no long step: it sliced {sliced:,} prompts only to "
                 f"fill steps up to the budget beside others, which lengthens those steps")
    elif chunked_ms < whole_ms:
        cause = (f"a whole long prompt (up to {longest:,} tokens here) stalls every running decode "
                 f"for one long step, a chunk of at most {budget:,} tokens only for a short one "
                 f"({sliced:,} prompts sliced)")
    else:
        cause = (f"{sliced:,} prompts were sliced into chunks of at most {budget:,} tokens, and "
                 f"{beside}: more steps shared with prompts cost the decodes more than the "
                 f"shorter steps saved")
    throughput_pct = 100 * _share(chunked, continuous, "output_throughput")
    return head + cause + f". Throughput: {throughput_pct:.0f}% of CONTINUOUS's."


def wrapped(lines: list[str]) -> list[str]:
    return [textwrap.fill(line, width=100, subsequent_indent="  ") for line in lines]


def surprise_lines(results: dict[str, dict]) -> list[str]:
    """Results that look wrong next to the lesson, each explained by the counters behind it."""
    naive, static = results.get("NAIVE"), results.get("STATIC")
    continuous, chunked = results.get("CONTINUOUS"), results.get("CONTINUOUS+CHUNKED")
    lines = []
    if naive and static and _share(naive, static, "output_throughput") > 1.01:  # not a tie
        lines.append(naive_beats_static_line(naive, static))
    if continuous and chunked and round(100 * _share(chunked, continuous,
                                                     "output_throughput")) > 100:
        lines.append(chunking_raised_throughput_line(continuous, chunked))
    return lines + static_itl_lines(results)


def static_loss_line(static: dict) -> str:
    """Exercise 1: where STATIC's time and tokens went, each loss as its own number."""
    return (f"- Where STATIC loses: padding prompts to each batch's longest took "
            f"{static['prefill_padding_pct']:.0f}% of its computed tokens (its padded prefills "
            f"{static['prompt_time_pct']:.0f}% of its time); finished members decoding padding "
            f"{static['decode_padding_pct']:.0f}%; on average {static['mean_idle_batch_slots']:.1f} "
            f"batch seats stood empty while requests waited.")


def naive_beats_static_line(naive: dict, static: dict) -> str:
    """The surprise of short outputs: batching shares decode steps, and there are few."""
    mean_output = static["total_output_tokens"] / static["completed"]
    return (f"- NAIVE beats STATIC here ({naive['output_throughput']:,.0f} vs "
            f"{static['output_throughput']:,.0f} tok/s): outputs are short ({mean_output:,.0f} "
            f"tokens on average), so the work is mostly prompts, and STATIC pads each batch's "
            f"prompts to its longest: {static['prefill_padding_pct']:.0f}% of its computed tokens "
            f"were prompt padding, {static['prompt_time_pct']:.0f}% of its time went to padded "
            f"prefills. Batching pays in decode steps, and there were few to share.")


def chunking_raised_throughput_line(continuous: dict, chunked: dict) -> str:
    """The surprise of chunking raising throughput: it computes the same tokens, so the gain must
    come from steps it did not waste (and from work it did not do twice). Each cause is said only
    where its counters show it."""
    causes = []
    if continuous["decode_only_waiting_pct"] > chunked["decode_only_waiting_pct"]:
        causes.append(
            f"CONTINUOUS spent {continuous['decode_only_waiting_pct']:.0f}% of its time in "
            f"decode-only steps while requests waited (memory-bound, their compute idle, the next "
            f"whole prompt held back by KV blocks or the budget), CONTINUOUS+CHUNKED "
            f"{chunked['decode_only_waiting_pct']:.0f}%: its prompt chunks ran beside those decodes")
    elif chunked["decodes_beside_prompts_pct"] > continuous["decodes_beside_prompts_pct"]:
        causes.append(
            f"{chunked['decodes_beside_prompts_pct']:.0f}% of CONTINUOUS+CHUNKED's decode tokens "
            f"shared a step with prompt tokens, {continuous['decodes_beside_prompts_pct']:.0f}% of "
            f"CONTINUOUS's: prompt work filled the compute that memory-bound decode steps leave idle")
    if continuous["num_recomputed_tokens"] > chunked["num_recomputed_tokens"]:
        causes.append(
            f"preemptions threw away {continuous['recomputed_pct']:.1f}% of CONTINUOUS's computed "
            f"tokens ({continuous['num_preemptions']:,} preemptions) and "
            f"{chunked['recomputed_pct']:.1f}% of CONTINUOUS+CHUNKED's "
            f"({chunked['num_preemptions']:,})")
    because = "; ".join(causes) if causes else "none of the counters here says why"
    return (f"- Chunking raised throughput although it computes the same tokens "
            f"({chunked['output_throughput']:,.0f} vs {continuous['output_throughput']:,.0f} "
            f"tok/s): {because}.")


def goodput_line(continuous: dict, chunked: dict, slos_ms: dict) -> str:
    """Which continuous mode serves more requests within the SLOs, why (how many requests each
    missed each target by), and what chunking wins and loses besides: what the scheduler
    optimizes, in the lesson's words, is goodput."""
    (first, first_ms), *rest = slos_ms.items()
    missed = (f"{describe_slo(first, first_ms)} was missed by {continuous['missed_slos'][first]} "
              f"of CONTINUOUS's requests and {chunked['missed_slos'][first]} of "
              f"CONTINUOUS+CHUNKED's")
    for name, target_ms in rest:
        missed += (f", {describe_slo(name, target_ms)} by {continuous['missed_slos'][name]} and "
                   f"{chunked['missed_slos'][name]}")
    outcomes = {"wins": [], "ties": [], "loses": []}
    for key, label, unit, lower_is_better in (
            ("request_goodput", "goodput", " req/s", False), ("p99_itl_ms", "P99 ITL", " ms", True),
            ("output_throughput", "output tok/s", "", False),
            ("mean_ttft_ms", "mean TTFT", " ms", True)):
        with_chunks, without = chunked[key], continuous[key]
        precision = 2 if key == "request_goodput" else 0
        shown = f"{with_chunks:,.{precision}f}", f"{without:,.{precision}f}"
        if shown[0] == shown[1] or abs(with_chunks - without) <= 0.01 * abs(without):
            outcome = "ties"  # equal as printed, or within 1%
        else:
            outcome = "wins" if (with_chunks < without) == lower_is_better else "loses"
        outcomes[outcome].append(f"{label} ({shown[0]} vs {shown[1]}{unit})")
    verdict = "; ".join(f"{outcome} on {_and(items)}" for outcome, items in outcomes.items()
                        if items)
    return f"- Chunking {verdict}. Goodput counts the requests that met every SLO: {missed}."


def static_itl_lines(results: dict[str, dict]) -> list[str]:
    """The surprise of STATIC's low ITL: nothing ever shares its decode steps."""
    static = results.get("STATIC")
    others = [(name, results[name]) for name in ("CONTINUOUS", "CONTINUOUS+CHUNKED")
              if name in results]
    if not (static and others) or any(static["p99_itl_ms"] >= m["p99_itl_ms"] for _, m in others):
        return []
    name, lowest = min(others, key=lambda other: other[1]["p99_itl_ms"])
    return [f"- STATIC's P99 ITL ({static['p99_itl_ms']:,.1f} ms) beats {name}'s "
            f"({lowest['p99_itl_ms']:,.1f} ms) because no prompt ever shares its decode steps: a "
            f"batch prefills once, then only decodes ({static['decodes_beside_prompts_pct']:.0f}% "
            f"of its decode tokens beside prompt tokens, {lowest['decodes_beside_prompts_pct']:.0f}% "
            f"of {name}'s); its requests pay for that before their first token."]


def _and(items: list[str]) -> str:
    """["a", "b", "c"] -> "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _share(a: dict, b: dict, key: str) -> float:
    return a[key] / b[key]


def _ratio(a: dict, b: dict, key: str) -> str:
    return f"{_share(a, b, key):.1f}x"


def speculation_lines(rows: list[tuple[str, dict]]) -> list[str]:
    """Per mode that verified drafts: how many, how many were accepted (vLLM's figures)."""
    lines = []
    for name, metrics in rows:
        if "spec_decode_num_drafts" not in metrics:
            continue
        per_position = "/".join(f"{100 * rate:.0f}"
                                for rate in metrics["spec_decode_per_position_acceptance_rates"])
        lines += textwrap.wrap(
            f"{name}: {metrics['spec_decode_num_drafts']:,} drafts verified, "
            f"{metrics['spec_decode_acceptance_rate']:.1f}% of their tokens accepted, mean "
            f"acceptance length {metrics['spec_decode_mean_acceptance_length']:.2f}, per position "
            f"{per_position}%", width=100, subsequent_indent="  ")
    return lines


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


def config_json(config, plan) -> dict:
    """The JSON "config" object: every EngineConfig field, the KV pool's size and the memory
    split per GPU (bytes: usable, weights, activation reserve, KV cache). The
    speculative_config key appears only when a run speculates."""
    fields = asdict(config)
    if config.speculative_config is None:
        del fields["speculative_config"]
    fields.update(num_gpu_blocks=plan.num_gpu_blocks, kv_cache_tokens=plan.kv_cache_tokens,
                  usable_bytes=plan.usable_bytes, weight_bytes=plan.weight_bytes,
                  activation_reserve_bytes=plan.activation_reserve_bytes,
                  kv_cache_bytes=plan.kv_cache_bytes)  # the memory split, per GPU
    return fields


def to_json(config, plan, workload, results: list[tuple[str, dict]], recorders,
            indent: Optional[int] = 2) -> str:
    """The JSON contract (README, "Machine-readable output"): config, workload, one result per
    mode (plus rejections)."""
    entries = []
    for (name, metrics), (_, recorder) in zip(results, recorders):
        rejections = [{"id": r.request_id, "reason": r.reject_reason}
                      for r in recorder.rejections()]
        entries.append({"mode": name, **metrics, "rejections": rejections})
    document = {"config": config_json(config, plan), "workload": workload.params,
                "results": entries}
    return json.dumps(document, indent=indent, allow_nan=False)
