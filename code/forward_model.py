"""The virtual clock: how long one engine step takes, from the work in its batch.

"Prefill is compute-bound, decode is memory-bound" is a statement about this function. One
forward pass over a batch does two kinds of work, each bounded by two limits (a roofline):

    GEMMs      FLOPs   2 x linear params x new tokens  (+ LM head for each sequence's last token)
               bytes   every weight, read once per step, however many tokens share it
    attention  FLOPs   4 x layers x heads x head_dim x (query, key) pairs, causal
               bytes   KV of every context token read, KV of every new token written

and some work whose time does not depend on how many tokens the step carries:

    step time = roofline(GEMM FLOPs / compute, weight bytes / bandwidth)
              + roofline(attention FLOPs / compute, KV bytes / bandwidth)
              + all-reduces (tensor parallelism: twice per layer)
              + layers x a fixed cost per layer + a fixed cost per step

    roofline(c, m) = (c^p + m^p)^(1/p),  p = ROOFLINE_SHARPNESS

The ideal roofline is max(c, m) (p infinite): moving bytes and computing hide entirely behind
each other. A step is a dozen kernels per layer, and inside each the two overlap only in part.
The loss is largest at the ridge, where c and m are close (a 128-token prompt on a 7B model costs
1.7 x max(c, m)), and fades as one of them dominates (a long prefill: c; a decode: m).

A decode step of 64 requests reads the 70 GB of weights once, as a step of one does: it costs
far less than 64 steps of one. A 2,000-token prefill does 2,000 tokens of GEMM FLOPs: far more
than one decode step. Continuous batching wins because of that asymmetry.

Every constant below is global: the same for every model and GPU, each fixed by the published
measurements `python code/main.py calibration` replays (README: "How close is the clock?").
With speculative decoding (`SpeculativeClock`) the batch already holds the drafts to verify,
1 + k tokens per decode, and the proposer's passes are priced by this same clock run on the
drafter's shapes. Left out: activations' own memory traffic, the attention kernel's tiling,
CPU-side work that grows with the batch (Python scheduling, detokenization), HTTP and
tokenization. `LinearClock` is the lesson toy's clock, kept to show why its table came out
upside down: it charges every decode token a fixed cost, as if a GPU had no weights to share.
"""

import math
from dataclasses import dataclass, replace
from typing import Optional

from batch import SchedulerOutput
from config import EngineConfig
from gpu_memory import lookup
from moe import expert_streaming
from presets import DTYPE_BYTES, ModelSpec

# Achievable fractions of the datasheet peaks, by the precision of the multiply. In isolation an
# H100's cuBLASLt FP8 GEMM of 8192^3 reaches about 81% of the dense FP8 peak (public cross-check
# report "cuBLASLt FP8 GEMM Cross-Check", 2026-05-24, eight GPUs); a serving step's GEMMs are
# smaller and per-tensor scaled, and the card throttles its clock under FP8's power draw. Fixed
# by long prefills, where the GEMMs decide. 16-bit: the 2,048-token first-token latencies on an
# A100 in TensorRT-LLM's docs/source/performance.md (v0.9.0 low-latency tables: Llama-2-7B
# 132.4 ms, Mistral-7B 139.6 ms), about 70% of 312 TFLOP/s. FP8: the same tables on H100 and
# H200 (Llama-2-7B 30.8 and 30.2 ms, Llama-2-70B on 4 x H200 103.0 ms) and NIM's 5,000-token
# TTFT (406.8 ms on 2 x H100): 55% of the FP8 peak, about 1.6x the 16-bit rate rather than 2x.
COMPUTE_EFFICIENCY_16BIT = 0.70  # BF16 and FP16
COMPUTE_EFFICIENCY_FP8 = 0.55
# Copy and STREAM-triad kernels sustain 90-92% of an H100's 3.35 TB/s; so does decode's weight
# streaming: measured H100 -> H200 decode speed-ups (vLLM, Llama-3-8B 997.5 -> 833.4 ms,
# Llama-3-70B TP4 2,444 -> 2,078 ms) leave no room for a lower share once the fixed costs are in.
BANDWIDTH_EFFICIENCY = 0.90
# How sharp the roofline's corner is: p = 1 would add compute and memory time, p infinite would
# take the larger. Fixed by short prompts, which sit near the ridge: TensorRT-LLM's 128-token
# first-token latencies (Llama-2-7B on an A100 16.2 ms, where c and m are each about 7.5 ms;
# Llama-2-70B FP8 on 4 x H100 19.6 ms) against their 2,048-token ones, where compute decides.
# 1.15-1.3 fit those rows about equally; servesim takes the sharpest corner they allow.
ROOFLINE_SHARPNESS = 1.3
# Work in every layer whose time does not shrink with the batch or with tensor parallelism: two
# RMSNorms, RoPE, the KV-cache write, the activation, residual adds, FP8 activation scaling, and
# the launch gaps, ramp-up and tail of a dozen kernels, a few microseconds each. And per step:
# sampling over the vocabulary, the hand-over of positions and block tables, the wait for the
# sampled tokens. Fixed by small-batch decode (vLLM batch 8 on A100, H100, H200: 12.4, 7.8 and
# 6.5 ms a step where the bytes alone take 8.2, 5.0 and 3.5 ms; NIM's ITL at one client: 18.6
# ms where the bytes take 11.7) and by 128-token prompts on 7B (32 layers) and 70B (80 layers).
LAYER_FIXED_S = 50e-6
STEP_FIXED_S = 1.2e-3
# Tensor parallelism: two all-reduces of the hidden states per layer (after attention and after
# the MLP). A small message is latency-bound: log2(tp) rounds of exchange, each about 12 us of
# synchronisation across NVLink (fixed by TensorRT-LLM's 128-token latencies of Llama-2-70B on
# 4 and 8 GPUs, v0.8.0 and v0.9.0 tables: 16.0-19.6 ms on Hopper, 35.6-45.6 ms on A100). A large one is bandwidth-bound: a ring moves 2 (tp-1)/tp of the message through
# each GPU's link, and all-reduce kernels reach about two thirds of the link's per-direction
# peak on the tens of MB a long prefill sends (fixed by the 2,048-token latencies on 8 x H100,
# 4 x H200 and 8 x A100, and NIM's 5,000-token TTFT on 2 x H100).
ALL_REDUCE_ROUND_S = 12e-6
LINK_EFFICIENCY = 0.65
ACTIVATION_BYTES = 2          # activations travel between GPUs in BF16


def roofline_s(compute_s: float, memory_s: float) -> float:
    """Compute and memory time of the same kernels, combined: between max(c, m) and c + m.

    Never below memory_s: no step beats its bytes at the derated bandwidth.
    """
    p = ROOFLINE_SHARPNESS
    return (compute_s ** p + memory_s ** p) ** (1 / p)


class RooflineClock:
    """Step time of a batch on `config.gpu` running `config.model`, from FLOPs and bytes.

    Everything that depends only on the model, the GPU and the tensor-parallel degree is
    worked out once here, so that `price` is a handful of multiplications per step.

    `model` prices another model on the same GPUs instead: a speculative drafter, whose passes
    run inside the target's step and so pay their layers' fixed costs but not the step's
    (`in_target_step`: the scheduling, the hand-over and the wait for sampled tokens are the
    target step's, paid once).
    """

    def __init__(self, config: EngineConfig, model: Optional[ModelSpec] = None,
                 in_target_step: bool = False):
        target, gpu = lookup(config)
        model = model or target
        tp = config.tensor_parallel_size
        # Per GPU: tensor parallelism splits every matrix and the KV heads tp ways (at least one
        # KV head per GPU). A token computes on its active weights; a step reads all but the
        # routed experts, and of those the ones its tokens touch (moe.py: `self.experts`).
        self.linear_params = model.num_active_linear_params / tp
        self.lm_head_params = model.vocab_size * model.hidden_size / tp
        self.weight_bytes_per_step = (model.num_always_read_params / tp
                                      * DTYPE_BYTES[model.weight_dtype]
                                      + self.lm_head_params * 2)
        bytes_per_s = gpu.memory_bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY
        self.weight_stream_s = self.weight_bytes_per_step / bytes_per_s
        self.kv_s_per_token = (model.kv_bytes_per_token_per_gpu(config.kv_cache_dtype, tp)
                               / bytes_per_s)
        # FP8 weights on a GPU without FP8 tensor cores are upcast and multiplied at the 16-bit
        # rate (vLLM's Marlin kernels); the LM head and attention run in 16-bit, and so do
        # MXFP4 experts (upcast on Hopper and older: servesim's GPUs have no FP4 rate).
        fp8_linear = model.weight_dtype == "fp8" and gpu.fp8_tflops is not None
        bf16_flops_per_s = gpu.bf16_tflops * 1e12 * COMPUTE_EFFICIENCY_16BIT
        linear_flops_per_s = (gpu.fp8_tflops * 1e12 * COMPUTE_EFFICIENCY_FP8 if fp8_linear
                              else bf16_flops_per_s)
        self.gemm_s_per_token = 2 * self.linear_params / linear_flops_per_s
        self.lm_head_s_per_seq = 2 * self.lm_head_params / bf16_flops_per_s  # last token only
        self.attention_s_per_pair = (model.attention_flops_per_pair() / tp / bf16_flops_per_s)
        self.sliding = sliding_window_cost(model, config, bytes_per_s, bf16_flops_per_s)
        link_bytes_per_s = gpu.interconnect_gbs * 1e9 * LINK_EFFICIENCY
        self.num_ranks = config.data_parallel_size
        self.experts = None
        if model.moe is not None:
            self.experts = expert_streaming(
                model.moe, model.hidden_size, DTYPE_BYTES[model.expert_dtype],
                tp * config.data_parallel_size, bytes_per_s,
                config.enable_expert_parallel, link_bytes_per_s, ACTIVATION_BYTES,
                ALL_REDUCE_ROUND_S)
        num_all_reduces = num_all_reduces_per_step(model, config) if tp > 1 else 0
        ring_bytes_per_token = model.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp
        self.all_reduce_s_per_token = (num_all_reduces * ring_bytes_per_token / link_bytes_per_s)
        # What every step pays, whatever it carries: per-layer and per-step work, and the
        # latency of its all-reduces.
        step_fixed_s = 0.0 if in_target_step else STEP_FIXED_S
        self.fixed_s = (model.num_layers * LAYER_FIXED_S + step_fixed_s
                        + num_all_reduces * ALL_REDUCE_ROUND_S * math.log2(tp))

    def step_time_s(self, batch: SchedulerOutput) -> float:
        return self.price(batch.num_scheduled_tokens, batch.num_seqs, batch.num_attention_pairs,
                          batch.num_context_tokens)

    def decode_step_time_s(self, num_seqs: int, num_context_tokens: int) -> float:
        """A step of `num_seqs` decodes only: what step_time_s prices such a batch at."""
        return self.price(num_seqs, num_seqs, num_context_tokens + num_seqs, num_context_tokens)

    def shortest_step_s(self) -> float:
        """The cheapest step there is: one token of one sequence with nothing cached."""
        return self.price(1, 1, 1, 0)

    def price(self, num_tokens: int, num_seqs: int, num_pairs: int,
              num_context_tokens: int) -> float:
        """Seconds for one step computing `num_tokens` new tokens of `num_seqs` sequences.

        With data-parallel attention ranks every rank runs its share of the batch (servesim
        spreads it evenly: no rank waits for a busier one), and the experts see all of it."""
        weight_s, experts_s = self.weight_stream_s, 0.0
        if self.experts is not None:  # MoE: the experts the tokens touch, their all-to-alls
            weight_s += self.experts.stream_s(num_tokens)
            experts_s = self.experts.all_to_all_s(num_tokens)
        if self.num_ranks > 1:  # one rank's share of the batch
            num_tokens, num_seqs, num_pairs, num_context_tokens = (
                num_tokens / self.num_ranks, num_seqs / self.num_ranks,
                num_pairs / self.num_ranks, num_context_tokens / self.num_ranks)
        gemm_s = roofline_s(num_tokens * self.gemm_s_per_token
                            + num_seqs * self.lm_head_s_per_seq, weight_s)
        sliding_compute_s, sliding_memory_s = self.sliding.cost_s(num_tokens, num_seqs, num_pairs,
                                                                  num_context_tokens)
        attention_s = roofline_s(num_pairs * self.attention_s_per_pair + sliding_compute_s,
                                 (num_context_tokens + num_tokens) * self.kv_s_per_token
                                 + sliding_memory_s)
        return (gemm_s + attention_s + num_tokens * self.all_reduce_s_per_token + experts_s
                + self.fixed_s)


def num_all_reduces_per_step(model: ModelSpec, config: EngineConfig) -> int:
    """Two all-reduces per layer under tensor parallelism, after attention and after the MLP;
    with expert parallelism an MoE layer's MLP ends in the experts' combine instead (moe.py)."""
    if config.enable_expert_parallel and model.moe is not None:
        return 2 * model.num_layers - model.moe.num_moe_layers
    return 2 * model.num_layers


@dataclass(frozen=True)
class SlidingWindowCost:
    """Sliding-window layers (gpt-oss) attend to the last `window` tokens only: per step at most
    window keys per new token, and window tokens of KV per sequence read. servesim sees a step's
    totals, not each sequence's length, so it takes the smaller of the full figure and the
    window's bound (exact when every context is past the window or within it)."""
    window: int
    s_per_pair: float
    kv_s_per_token: float

    def cost_s(self, num_tokens: int, num_seqs: int, num_pairs: int,
               num_context_tokens: int) -> tuple[float, float]:
        """(compute seconds, memory seconds) of the sliding-window layers in one step."""
        if self.window == 0:
            return 0.0, 0.0
        pairs = min(num_pairs, num_tokens * self.window)
        kv_tokens = min(num_context_tokens + num_tokens, num_seqs * self.window + num_tokens)
        return pairs * self.s_per_pair, kv_tokens * self.kv_s_per_token


def sliding_window_cost(model: ModelSpec, config: EngineConfig, bytes_per_s: float,
                        flops_per_s: float) -> SlidingWindowCost:
    tp = config.tensor_parallel_size
    share = model.kv_bytes_per_token_per_gpu(config.kv_cache_dtype, tp) / max(
        1, model.kv_bytes_per_token(config.kv_cache_dtype))
    return SlidingWindowCost(
        model.sliding_window if model.num_sliding_layers else 0,
        model.sliding_attention_flops_per_pair() / tp / flops_per_s,
        model.sliding_kv_bytes_per_token(config.kv_cache_dtype) * share / bytes_per_s)


class LinearClock:
    """The lesson toy's clock: a fixed cost per step, per prompt token and per decode token.

    Recomputed tokens of a resumed request count as prompt tokens. Because every decode token
    costs the same whether it runs alone or beside 63 others, batching buys nothing here.
    """

    def __init__(self, config: EngineConfig):
        self.step_s = config.linear_step_ms / 1000
        self.prefill_token_s = config.linear_prefill_token_ms / 1000
        self.decode_token_s = config.linear_decode_token_ms / 1000

    def step_time_s(self, batch: SchedulerOutput) -> float:
        num_decode = batch.num_decode_tokens
        num_prefill = batch.num_scheduled_tokens - num_decode
        return self.step_s + self.prefill_token_s * num_prefill + self.decode_token_s * num_decode

    def decode_step_time_s(self, num_seqs: int, num_context_tokens: int) -> float:
        """A step of `num_seqs` decodes only: what step_time_s prices such a batch at."""
        return self.step_s + self.prefill_token_s * 0 + self.decode_token_s * num_seqs

    def shortest_step_s(self) -> float:
        """The cheapest step there is: one token, prompt or decode, whichever costs less."""
        return self.step_s + min(self.prefill_token_s, self.decode_token_s)


class SpeculativeClock:
    """A step with speculative decoding: the target's pass, whose batch holds the drafts to
    verify, then the proposer's passes for the next step's drafts (spec_decode.py prices their
    pattern with `drafter`, a RooflineClock of the drafter). Its decodes are never repeated in
    bulk (scheduler.py), so it needs no `decode_step_time_s`."""

    def __init__(self, target, drafter: RooflineClock, speculative_config):
        self.target = target
        self.drafter = drafter
        self.speculative_config = speculative_config

    def step_time_s(self, batch: SchedulerOutput) -> float:
        return (self.target.step_time_s(batch)
                + self.speculative_config.drafting_time_s(batch, self.drafter.price))

    def shortest_step_s(self) -> float:
        """The target's cheapest step: drafting only adds to it."""
        return self.target.shortest_step_s()


def make_clock(config: EngineConfig):
    """The clock `--forward-model` names; with a drafting model (an EAGLE head, a draft model)
    on the roofline clock, its passes too. The lesson toy's linear clock knows no drafter:
    verifying counts as decode tokens there, drafting is free, and n-gram needs no GPU work."""
    if config.forward_model == "linear":
        return LinearClock(config)
    clock = RooflineClock(config)
    speculative = config.speculative_config
    drafter = speculative.drafter_model(lookup(config)[0]) if speculative else None
    if drafter is None:
        return clock
    drafter_config = replace(config, tensor_parallel_size=speculative.draft_tp(
        config.tensor_parallel_size))
    return SpeculativeClock(clock, RooflineClock(drafter_config, drafter, in_target_step=True),
                            speculative)
