"""`presets`: the GPU and model presets (presets.py), with the figures derived from them."""

import textwrap

from presets import GPUS, MODELS


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser("presets", help="list the GPU and model presets",
                                   description="Every GPU and model preset with derived figures: "
                                               "parameters, weight GiB, KV bytes per token.")
    parser.set_defaults(command=run_presets)


def run_presets(args, context) -> str:
    return "\n".join(presets_tables())


def presets_tables() -> list[str]:
    """Every GPU and model, with the figures derived from them."""
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
                  "kv_heads x head_dim x bytes; MLA: layers x (kv_lora_rank + qk_rope_head_dim) x "
                  "bytes; sliding-window layers, which hold only their window, left out)"]
    rows = [("key", "layers", "hidden", "heads/kv", "params B", "weights", "weights GiB",
             "KV B/token 16-bit", "KV B/token fp8")]
    for key, model in MODELS.items():
        rows.append((key, str(model.num_layers), f"{model.hidden_size:,}",
                     f"{model.num_heads}/{model.num_kv_heads}", f"{model.num_params / 1e9:.2f}",
                     model.weight_dtype, f"{model.weight_bytes / gib:.2f}",
                     f"{model.kv_bytes_per_token('auto'):,}", f"{model.kv_bytes_per_token('fp8'):,}"))
    lines += _aligned(rows, num_text_columns=1)
    lines += [""] + experts_table()
    lines += ["", "Sources"]
    for key, preset in [*GPUS.items(), *MODELS.items()]:
        lines.append(textwrap.fill(f"{key}: {preset.source}", width=100, subsequent_indent="    ",
                                   break_on_hyphens=False))
    return lines


def experts_table() -> list[str]:
    """The MoE models' experts and attention, and what servesim does and does not model."""
    lines = ["Mixture-of-Experts models (active = what one token computes on: attention, dense "
             "layers, shared and k routed experts, embeddings)"]
    rows = [("key", "params B", "active B", "experts k/E", "MoE layers", "shared", "experts in",
             "attention", "context")]
    for key, model in MODELS.items():
        moe = model.moe
        if moe is None:
            continue
        active = model.num_active_linear_params + model.num_embedding_params + model.num_small_params
        rows.append((key, f"{model.num_params / 1e9:.1f}", f"{active / 1e9:.1f}",
                     f"{moe.experts_per_token}/{moe.num_experts}",
                     f"{moe.num_moe_layers}/{model.num_layers}",
                     f"{moe.shared_intermediate_size:,}" if moe.shared_intermediate_size else "-",
                     model.expert_dtype, _attention_kind(model),
                     f"{model.max_position_embeddings:,}"))
    lines += _aligned(rows, num_text_columns=1)
    lines += textwrap.wrap(
        "servesim models per step: the experts the step's tokens touch, in expectation "
        "E(1 - (1 - k/E)^T), read once; compute on active weights only; expert parallelism's "
        "dispatch and combine all-to-alls by bytes over the GPU link; MLA's latent KV; "
        "sliding-window layers holding their window; MTP layers as drafters. It does not model: "
        "expert load imbalance (routing is uniform), EPLB, Llama-4's chunked attention (priced as "
        "full), MoE kernels' own efficiency (grouped GEMMs run at the dense rate).", width=100)
    return lines


def _attention_kind(model) -> str:
    if model.mla is not None:
        return f"MLA {model.mla.kv_lora_rank}+{model.mla.qk_rope_head_dim}"
    if model.num_sliding_layers:
        return f"GQA, {model.num_sliding_layers} sliding {model.sliding_window}"
    return f"GQA {model.num_heads}/{model.num_kv_heads}"


def _aligned(rows: list[tuple], num_text_columns: int) -> list[str]:
    """Left-align the first columns (names), right-align the rest (numbers)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(w) if i < num_text_columns else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines
