"""The virtual clock: how long one engine step takes, from the work in its batch.

"Prefill is compute-bound, decode is memory-bound" is a statement about this function. One
forward pass over a batch does two kinds of work, each bounded by two limits (a roofline):

    GEMMs      FLOPs   2 x linear params x new tokens  (+ LM head for each sequence's last token)
               bytes   every weight, read once per step, however many tokens share it
    attention  FLOPs   4 x layers x heads x head_dim x (query, key) pairs, causal
               bytes   KV of every context token read, KV of every new token written

and some work whose time does not depend on how many tokens the step carries:

    GPU  = roofline(GEMM FLOPs / compute, weight bytes / bandwidth)    gemm_s
         + roofline(attention FLOPs / compute, KV bytes / bandwidth)   attention_s
         + all-reduces (tensor parallelism: twice per layer)           all_reduces_s
         + layers x a fixed cost per layer + a fixed cost per step     fixed_s
    CPU  = the engine's own work around the step, by vLLM version     cpu_s (engine_overhead.py)
    step = GPU + CPU (sync), or max(GPU, CPU) (async scheduling)

    roofline(c, m) = (c^p + m^p)^(1/p),  p = ROOFLINE_SHARPNESS

compute and bandwidth are what the GPU reaches, not its datasheet: each GPU preset carries its
own GEMM and copy-kernel shares from microbenchmarks (presets.Achievable), and the all-reduce is
the implementation vLLM picks for the message (its custom kernel, or NCCL/RCCL's ring).

The ideal roofline is max(c, m) (p infinite): moving bytes and computing hide entirely behind
each other. A step is a dozen kernels per layer, and inside each the two overlap only in part.
The loss is largest at the ridge, where c and m are close (a 128-token prompt on a 7B model costs
1.7 x max(c, m)), and fades as one of them dominates (a long prefill: c; a decode: m).

A decode step of 64 requests reads the 70 GB of weights once, as a step of one does: it costs
far less than 64 steps of one. A 2,000-token prefill does 2,000 tokens of GEMM FLOPs: far more
than one decode step. Continuous batching wins because of that asymmetry.

Every constant below is the same for every model and GPU and names where it comes from; the
per-GPU figures live in presets.py with theirs (code/README.md: "The clock", "How close is the
clock?"; `python code/main.py calibration` replays published measurements against it).
With speculative decoding (`SpeculativeClock`) the batch already holds the drafts to verify,
1 + k tokens per decode, and the proposer's passes are priced by this same clock run on the
drafter's shapes. Left out: activations' own memory traffic, the attention kernel's tiling and
its own efficiency, HTTP and tokenization. `LinearClock` is the lesson toy's clock, kept to show why its table came out
upside down: it charges every decode token a fixed cost, as if a GPU had no weights to share.
"""

import copy
from dataclasses import dataclass, replace
from typing import Optional

from batch import SchedulerOutput, attention_pairs
from config import EngineConfig
from engine_overhead import VERSIONS, StepCost, step_wall_s
from gpu_memory import lookup
from moe import expert_streaming
from presets import DTYPE_BYTES, GpuSpec, ModelSpec

# -- what the GPU's kernels reach ---------------------------------------------------------------
# Each GPU preset carries what its GEMM library and its memory reach in isolation, as shares of
# its datasheet peaks (presets.Achievable: cuBLASLt / hipBLASLt at 8192^3 and STREAM copy, one
# cloud's suite for A100, H100, H200, GB200 and MI300X). A serving step's GEMMs are smaller than
# 8192^3 and per-tensor scaled, so they reach a share of that microbenchmark; one share, the same
# for every GPU and precision, because two independent sets of rows give the same one:
# TensorRT-LLM's 2,048-token first-token latencies on an A100 (FP16; docs/source/performance.md,
# v0.9.0: Llama-2-7B 132.4 ms) need 70% of the peak where the microbenchmark reaches 81%, and the
# FP8 prefills on H100 and H200 (the same tables' Llama-2-70B; NIM's 5,000-token TTFT) need 55%
# where it reaches 65%: 0.86 and 0.85 of the microbenchmark.
SERVING_GEMM_SHARE = 0.85
# Decode streams the weights as a copy kernel streams memory: the STREAM copy share of each GPU,
# as measured (H100 87%, H200 84%, A100 79%, MI300X 78%), with no factor of servesim's own.
# How sharp the roofline's corner is: p = 1 would add compute and memory time, p infinite would
# take the larger. Fixed by short prompts, which sit near the ridge: TensorRT-LLM's 128-token
# first-token latencies (Llama-2-7B on an A100 16.2 ms, where c and m are each about 7.5 ms;
# Llama-2-70B FP8 on 4 x H100 19.6 ms) against their 2,048-token ones, where compute decides.
# 1.15-1.3 fit those rows about equally; servesim takes the sharpest corner they allow.
ROOFLINE_SHARPNESS = 1.3

# -- what every step and layer costs on the GPU, whatever the batch --------------------------
# Work in every layer whose time does not shrink with the batch or with tensor parallelism: two
# RMSNorms, RoPE, the KV-cache write, the activation, residual adds, FP8 activation scaling, and
# the launch gaps, ramp-up and tail of a dozen kernels, a few microseconds each. And per step on
# the GPU: sampling over the vocabulary, the hand-over of positions and block tables, the copy
# of the sampled tokens to the host. The CPU's own work per step is the engine's
# (engine_overhead.py), by vLLM version. Fixed by small-batch decode (vLLM batch 8 on A100, H100,
# H200: 12.4, 7.8 and 6.5 ms a step where the bytes alone take about 8.5, 5.2 and 3.6 ms; NIM's
# ITL at one client: 18.6 ms where the bytes take 12) and by 128-token prompts on 7B (32 layers)
# and 70B (80 layers), together with the CPU part those engines leave visible.
LAYER_FIXED_S = 50e-6
STEP_FIXED_S = 0.7e-3

# -- tensor parallelism: two all-reduces of the hidden states per layer -------------------------
# vLLM sends a small message through its own all-reduce kernel (one-shot or two-shot over
# NVLink / Infinity Fabric, vllm/distributed/device_communicators/custom_all_reduce.py, below
# 8 MiB; on GPUs linked only by PCIe at TP 2 only) and a large one through NCCL / RCCL's ring.
# Each is a fixed cost plus the ring's 2 (tp - 1) / tp of the message at a bus bandwidth
# (presets.AllReduceSpec, from published tables); vLLM's size thresholds pick the faster, so
# servesim does.
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 * 2**20
ACTIVATION_BYTES = 2          # activations travel between GPUs in BF16


def roofline_s(compute_s: float, memory_s: float) -> float:
    """Compute and memory time of the same kernels, combined: between max(c, m) and c + m.

    Never below memory_s: no step beats its bytes at the achievable bandwidth.
    """
    p = ROOFLINE_SHARPNESS
    return (compute_s ** p + memory_s ** p) ** (1 / p)


def achievable_flops_per_s(gpu: GpuSpec, fp8: bool) -> float:
    """FLOP/s a serving step's GEMMs reach on `gpu`: its datasheet peak x its microbenchmark
    share x the serving share. FP8 on a GPU without FP8 tensor cores runs at the 16-bit rate
    (FP8 weights upcast by vLLM's Marlin kernels)."""
    if fp8 and gpu.fp8_tflops is not None:
        return gpu.achievable_fp8_tflops * 1e12 * SERVING_GEMM_SHARE
    return gpu.achievable_bf16_tflops * 1e12 * SERVING_GEMM_SHARE


def achievable_bytes_per_s(gpu: GpuSpec) -> float:
    """Bytes/s decode's weight and KV streams reach on `gpu`: what its copy kernel reaches."""
    return gpu.achievable_bandwidth_gbs * 1e9


def roofline_corner_flops_per_byte(gpu: GpuSpec, fp8: bool) -> float:
    """The ridge: FLOPs per byte at which a GEMM takes as long to compute as to stream, from the
    achievable figures (not the datasheet's): above it a step is compute-bound."""
    return achievable_flops_per_s(gpu, fp8) / achievable_bytes_per_s(gpu)


def uses_custom_all_reduce(gpu: GpuSpec, tp: int, message_bytes: float) -> bool:
    """vLLM's custom all-reduce takes messages below 8 MiB within a node whose GPUs all reach
    each other (NVLink, Infinity Fabric), or two PCIe GPUs (`CustomAllreduce.should_custom_ar`)."""
    return (message_bytes < CUSTOM_ALL_REDUCE_MAX_BYTES
            and (gpu.all_reduce.peer_to_peer or tp == 2))


def all_reduce_s(gpu: GpuSpec, tp: int, message_bytes: float) -> float:
    """One all-reduce of `message_bytes` across `tp` GPUs: the faster implementation vLLM has
    for it, each a fixed cost plus the ring's share of the message at its bus bandwidth."""
    if tp == 1:
        return 0.0
    spec = gpu.all_reduce
    moved = message_bytes * 2 * (tp - 1) / tp
    ring_s = spec.ring_latency_us * 1e-6 + moved / (spec.ring_bus_gbs * 1e9)
    if not uses_custom_all_reduce(gpu, tp, message_bytes):
        return ring_s
    custom_s = spec.custom_latency_us * 1e-6 + moved / (spec.custom_bus_gbs * 1e9)
    return min(custom_s, ring_s)


class RooflineClock:
    """Step time of a batch on `config.gpu` running `config.model`, from FLOPs and bytes on the
    GPU, plus the engine's CPU work (engine_overhead.py) as `config.vllm_version` does it.

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
        self.gpu, self.tp, self.hidden_size = gpu, tp, model.hidden_size
        # Per GPU: tensor parallelism splits every matrix and the KV heads tp ways (at least one
        # KV head per GPU). A token computes on its active weights; a step reads all but the
        # routed experts, and of those the ones its tokens touch (moe.py: `self.experts`).
        self.linear_params = model.num_active_linear_params / tp
        self.lm_head_params = model.vocab_size * model.hidden_size / tp
        self.weight_bytes_per_step = (model.num_always_read_params / tp
                                      * DTYPE_BYTES[model.weight_dtype]
                                      + self.lm_head_params * 2)
        bytes_per_s = achievable_bytes_per_s(gpu)
        self.weight_stream_s = self.weight_bytes_per_step / bytes_per_s
        self.kv_s_per_token = (model.kv_bytes_per_token_per_gpu(config.kv_cache_dtype, tp)
                               / bytes_per_s)
        # FP8 weights on a GPU without FP8 tensor cores are upcast and multiplied at the 16-bit
        # rate (vLLM's Marlin kernels); the LM head and attention run in 16-bit, and so do
        # MXFP4 experts (upcast on Hopper and older: servesim prices no FP4 rate).
        bf16_flops_per_s = achievable_flops_per_s(gpu, fp8=False)
        linear_flops_per_s = achievable_flops_per_s(gpu, fp8=model.weight_dtype == "fp8")
        self.gemm_s_per_token = 2 * self.linear_params / linear_flops_per_s
        self.lm_head_s_per_seq = 2 * self.lm_head_params / bf16_flops_per_s  # last token only
        self.attention_s_per_pair = model.attention_flops_per_pair() / tp / bf16_flops_per_s
        self.sliding = sliding_window_cost(model, config, bytes_per_s, bf16_flops_per_s)
        self.num_ranks = config.data_parallel_size
        self.experts = None
        if model.moe is not None:
            # Expert parallelism's dispatch and combine ride the links the all-reduce's ring
            # does: its bus bandwidth, and its fixed cost for each all-to-all's round.
            links = gpu.all_reduce
            self.experts = expert_streaming(
                model.moe, model.hidden_size, DTYPE_BYTES[model.expert_dtype],
                tp * config.data_parallel_size, bytes_per_s, config.enable_expert_parallel,
                links.ring_bus_gbs * 1e9, ACTIVATION_BYTES, links.ring_latency_us * 1e-6)
        self.num_all_reduces = num_all_reduces_per_step(model, config) if tp > 1 else 0
        # What every step pays on the GPU, whatever it carries: per-layer and per-step work.
        step_fixed_s = 0.0 if in_target_step else STEP_FIXED_S
        self.fixed_s = model.num_layers * LAYER_FIXED_S + step_fixed_s
        # The engine's CPU work: the target's step pays it, once (none inside it for drafts).
        self.engine = None if in_target_step else VERSIONS[config.vllm_version]
        self.async_scheduling = config.async_scheduling

    def step_time_s(self, batch: SchedulerOutput) -> float:
        return self.price(batch.num_scheduled_tokens, batch.num_seqs, batch.num_attention_pairs,
                          batch.num_context_tokens)

    def step_cost(self, batch: SchedulerOutput) -> StepCost:
        """The step's GPU and CPU parts apart, for a loop that overlaps them (async)."""
        return self.cost(batch.num_scheduled_tokens, batch.num_seqs, batch.num_attention_pairs,
                         batch.num_context_tokens)

    def decode_step_time_s(self, num_seqs: int, num_context_tokens: int) -> float:
        """A step of `num_seqs` decodes only: what step_time_s prices such a batch at."""
        return self.price(num_seqs, num_seqs, num_context_tokens + num_seqs, num_context_tokens)

    def chunk_step_time_s(self, num_decodes: int, num_context_tokens: int, num_chunk_tokens: int,
                          chunk_context_tokens: int) -> float:
        """A step of `num_decodes` decodes and one prompt's chunk: what step_time_s prices such
        a batch at."""
        num_pairs = (num_context_tokens + num_decodes
                     + attention_pairs(num_chunk_tokens, chunk_context_tokens))
        return self.price(num_decodes + num_chunk_tokens, num_decodes + 1, num_pairs,
                          num_context_tokens + chunk_context_tokens)

    def shortest_step_s(self) -> float:
        """The cheapest step there is: one token of one sequence with nothing cached."""
        return self.price(1, 1, 1, 0)

    def price(self, num_tokens: int, num_seqs: int, num_pairs: int,
              num_context_tokens: int) -> float:
        """Seconds for one step computing `num_tokens` new tokens of `num_seqs` sequences."""
        return step_wall_s(self.gpu_s(num_tokens, num_seqs, num_pairs, num_context_tokens),
                           self.cpu_s(num_seqs), self.async_scheduling)

    def cost(self, num_tokens: int, num_seqs: int, num_pairs: int,
             num_context_tokens: int) -> StepCost:
        return StepCost(self.gpu_s(num_tokens, num_seqs, num_pairs, num_context_tokens),
                        self.cpu_s(num_seqs))

    def gpu_s(self, num_tokens: int, num_seqs: int, num_pairs: int,
              num_context_tokens: int) -> float:
        """The forward pass: GEMMs, attention, all-reduces, MoE's all-to-alls and the fixed
        costs. With data-parallel attention ranks every rank runs its share of the batch
        (servesim spreads it evenly: no rank waits for a busier one), and the experts see all
        of it."""
        weight_s, all_to_all_s = self.weight_stream_s, 0.0
        if self.experts is not None:  # MoE: the experts the tokens touch, their all-to-alls
            weight_s += self.experts.stream_s(num_tokens)
            all_to_all_s = self.experts.all_to_all_s(num_tokens)
        if self.num_ranks > 1:  # one rank's share of the batch
            num_tokens, num_seqs, num_pairs, num_context_tokens = (
                num_tokens / self.num_ranks, num_seqs / self.num_ranks,
                num_pairs / self.num_ranks, num_context_tokens / self.num_ranks)
        return (self.gemm_s(num_tokens, num_seqs, weight_s)
                + self.attention_s(num_tokens, num_seqs, num_pairs, num_context_tokens)
                + self.all_reduces_s(num_tokens) + all_to_all_s + self.fixed_s)

    def gemm_s(self, num_tokens: float, num_seqs: float, weight_s: float) -> float:
        """The linear layers and the LM head: their FLOPs against streaming their weights."""
        return roofline_s(num_tokens * self.gemm_s_per_token + num_seqs * self.lm_head_s_per_seq,
                          weight_s)

    def attention_s(self, num_tokens: float, num_seqs: float, num_pairs: float,
                    num_context_tokens: float) -> float:
        """Attention: (query, key) pairs' FLOPs against reading and writing the KV cache, the
        sliding-window layers' within their window."""
        compute_s = num_pairs * self.attention_s_per_pair
        memory_s = (num_context_tokens + num_tokens) * self.kv_s_per_token
        if self.sliding.window:
            sliding_compute_s, sliding_memory_s = self.sliding.cost_s(
                num_tokens, num_seqs, num_pairs, num_context_tokens)
            compute_s += sliding_compute_s
            memory_s += sliding_memory_s
        return roofline_s(compute_s, memory_s)

    def all_reduces_s(self, num_tokens: float) -> float:
        """Two all-reduces per layer of the step's hidden states (none without TP; with expert
        parallelism an MoE layer's second is its combine)."""
        if not self.num_all_reduces:
            return 0.0
        message_bytes = num_tokens * self.hidden_size * ACTIVATION_BYTES
        return self.num_all_reduces * all_reduce_s(self.gpu, self.tp, message_bytes)

    def cpu_s(self, num_seqs: int) -> float:
        """The engine's CPU work around the step (each scheduled sequence samples one token)."""
        if self.engine is None:
            return 0.0
        return self.engine.cpu_s(num_seqs, num_seqs)


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

    def cost_s(self, num_tokens: float, num_seqs: float, num_pairs: float,
               num_context_tokens: float) -> tuple[float, float]:
        """(compute seconds, memory seconds) of the sliding-window layers in one step (a model
        with a window; attention_s asks only then)."""
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

    def chunk_step_time_s(self, num_decodes: int, num_context_tokens: int, num_chunk_tokens: int,
                          chunk_context_tokens: int) -> float:
        """A step of `num_decodes` decodes and one prompt's chunk: what step_time_s prices such
        a batch at."""
        return (self.step_s + self.prefill_token_s * num_chunk_tokens
                + self.decode_token_s * num_decodes)

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


def synchronous(clock):
    """The same clock for a loop that schedules each step after the last one's output: the
    CPU's work then adds to the GPU's instead of overlapping it (NAIVE and STATIC, CPU n-gram
    drafts, --no-async-scheduling). The lesson toy's linear clock has no CPU part."""
    if isinstance(clock, RooflineClock) and clock.async_scheduling:
        sync = copy.copy(clock)
        sync.async_scheduling = False
        return sync
    if isinstance(clock, SpeculativeClock):
        return SpeculativeClock(synchronous(clock.target), clock.drafter, clock.speculative_config)
    return clock


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
