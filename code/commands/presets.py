"""`presets`: the GPU and model presets (presets.py), with the figures derived from them."""

import textwrap

from presets import GPUS, MODELS
from reports.columns import aligned


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
    lines += aligned(rows, num_text_columns=2)
    lines += ["", "Models (from each checkpoint's config.json; KV bytes per token = layers x 2 x "
                  "kv_heads x head_dim x bytes)"]
    rows = [("key", "layers", "hidden", "heads/kv", "params B", "weights", "weights GiB",
             "KV B/token 16-bit", "KV B/token fp8")]
    for key, model in MODELS.items():
        rows.append((key, str(model.num_layers), f"{model.hidden_size:,}",
                     f"{model.num_heads}/{model.num_kv_heads}", f"{model.num_params / 1e9:.2f}",
                     model.weight_dtype, f"{model.weight_bytes / gib:.2f}",
                     f"{model.kv_bytes_per_token('auto'):,}", f"{model.kv_bytes_per_token('fp8'):,}"))
    lines += aligned(rows, num_text_columns=1)
    lines += ["", "Sources"]
    for key, preset in [*GPUS.items(), *MODELS.items()]:
        lines.append(textwrap.fill(f"{key}: {preset.source}", width=100, subsequent_indent="    ",
                                   break_on_hyphens=False))
    return lines
