"""`presets`: the GPU and model presets (presets.py), with the figures derived from them."""

import textwrap

from engine_overhead import VERSIONS
from forward_model import SERVING_GEMM_SHARE, roofline_corner_flops_per_byte
from presets import GPUS, MODELS
from reports.columns import aligned


def add_parser(subparsers, knobs) -> None:
    parser = subparsers.add_parser("presets", help="list the GPU and model presets",
                                   description="Every GPU and model preset with derived figures: "
                                               "parameters, weight GiB, KV bytes per token; what "
                                               "each GPU reaches of its peaks (GEMM and HBM "
                                               "shares, roofline corner in FLOP per byte, "
                                               "all-reduce fixed costs in us and ring bandwidth "
                                               "in GB/s) and whether it was measured; the vLLM "
                                               "versions' CPU costs per step.")
    parser.set_defaults(command=run_presets)


def run_presets(args, context) -> str:
    return "\n".join(presets_tables())


def presets_tables() -> list[str]:
    """Every GPU and model, with the figures derived from them."""
    gib = 2**30
    lines = ["GPUs (dense tensor-core peaks; memory as torch reports it)"]
    rows = [("key", "name", "memory GiB", "bandwidth GB/s", "BF16 TFLOP/s", "FP8 TFLOP/s",
             "FP4 TFLOP/s", "GPU link GB/s")]
    for key, gpu in GPUS.items():
        fp8 = "-" if gpu.fp8_tflops is None else f"{gpu.fp8_tflops:,.1f}"
        fp4 = "-" if gpu.fp4_tflops is None else f"{gpu.fp4_tflops:,.1f}"
        rows.append((key, gpu.name, f"{gpu.memory_gib:.2f}", f"{gpu.memory_bandwidth_gbs:,.0f}",
                     f"{gpu.bf16_tflops:,.1f}", fp8, fp4, f"{gpu.interconnect_gbs:,.0f}"))
    lines += aligned(rows, num_text_columns=2)
    lines += ["", "What each GPU reaches (shares of the peaks above from microbenchmarks; the clock "
                  f"takes {SERVING_GEMM_SHARE:.0%} of the GEMM share for a serving step's GEMMs)"]
    rows = [("key", "measured", "BF16 GEMM", "FP8 GEMM", "HBM", "corner FLOP/B BF16",
             "corner FP8", "custom AR us", "NCCL/RCCL us", "ring GB/s")]
    for key, gpu in GPUS.items():
        shares = gpu.achievable
        fp8 = "-" if shares.gemm_fp8 is None else f"{shares.gemm_fp8:.0%}"
        corner_fp8 = ("-" if gpu.fp8_tflops is None
                      else f"{roofline_corner_flops_per_byte(gpu, fp8=True):,.0f}")
        rows.append((key, "yes" if shares.measured else "NO: borrowed", f"{shares.gemm_16bit:.0%}",
                     fp8, f"{shares.hbm:.0%}",
                     f"{roofline_corner_flops_per_byte(gpu, fp8=False):,.0f}", corner_fp8,
                     f"{gpu.all_reduce.custom_latency_us:.1f}",
                     f"{gpu.all_reduce.ring_latency_us:.1f}", f"{gpu.all_reduce.ring_bus_gbs:,.0f}"))
    lines += aligned(rows, num_text_columns=2)
    lines += ["", "vLLM versions (--vllm-version: the engine's CPU work per step, engine_overhead.py)"]
    rows = [("version", "engine", "CPU/step us", "CPU/request us", "async default",
             "gpu-memory-utilization default")]
    for key, version in VERSIONS.items():
        rows.append((key, version.generation, f"{version.step_s * 1e6:,.0f}",
                     f"{version.per_request_s * 1e6:,.0f}",
                     "on" if version.async_scheduling_default else "off (none)",
                     f"{version.gpu_memory_utilization_default:g}"))
    lines += aligned(rows, num_text_columns=2)
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
    lines += aligned(rows, num_text_columns=1)
    lines += [""] + experts_table()
    lines += ["", "Sources"]
    sources = [f"{key}: {preset.source}" for key, preset in [*GPUS.items(), *MODELS.items()]]
    sources += [f"{key} reaches: {gpu.achievable.source}; all-reduce: {gpu.all_reduce.source}"
                for key, gpu in GPUS.items()]
    sources += [f"vLLM {key}: {version.source}" for key, version in VERSIONS.items()]
    for source in sources:
        lines.append(textwrap.fill(source, width=100, subsequent_indent="    ",
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
    lines += aligned(rows, num_text_columns=1)
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

