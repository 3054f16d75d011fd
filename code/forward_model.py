"""The virtual clock: how long one engine step takes, from the work in its batch.

"Prefill is compute-bound, decode is memory-bound" is a statement about this function. One
forward pass over a batch does two kinds of work, each bounded by the slower of its two limits
(a roofline):

    GEMMs      FLOPs   2 x linear params x new tokens  (+ LM head for each sequence's last token)
               bytes   every weight, read once per step, however many tokens share it
    attention  FLOPs   4 x layers x heads x head_dim x (query, key) pairs, causal
               bytes   KV of every context token read, KV of every new token written

    step time = max(GEMM FLOPs / compute, weight bytes / bandwidth)
              + max(attention FLOPs / compute, KV bytes / bandwidth)
              + all-reduce time (tensor parallelism) + a fixed per-step overhead

A decode step of 64 requests reads the 70 GB of weights once, as a step of one does: it costs
far less than 64 steps of one. A 2,000-token prefill does 2,000 tokens of GEMM FLOPs: far more
than one decode step. Continuous batching wins because of that asymmetry.

Left out: activations' memory traffic, kernel-launch detail, the attention kernel's own tiling,
sampling, and speculative decoding. `LinearClock` is the lesson toy's clock, kept to show why its
table came out upside down: it charges every decode token a fixed cost, as if a GPU had no weights
to share.
"""

from batch import SchedulerOutput
from config import EngineConfig
from gpu_memory import lookup
from presets import DTYPE_BYTES

# Achievable fractions of the datasheet peaks. Measured ceilings on an H100 SXM: a cuBLASLt FP8
# GEMM of 8192^3 reaches about 1,600-1,615 TFLOP/s, 81% of the dense peak (public cross-check
# report "cuBLASLt FP8 GEMM Cross-Check", 2026-05-24, eight GPUs, 500 iterations); copy and STREAM
# triad kernels sustain about 3.0-3.1 TB/s of HBM3, 90-92% of 3.35 TB/s. A serving step mixes
# smaller GEMMs, attention and elementwise kernels, so servesim derates below those ceilings; the
# engine as a whole is then checked against published serving throughput
# (tests/test_calibration.py: within 2x of TensorRT-LLM on H100, H200 and 2 x H100).
COMPUTE_EFFICIENCY = 0.70    # of the dense tensor-core peak, for large GEMMs
BANDWIDTH_EFFICIENCY = 0.85  # of HBM bandwidth, for weight and KV streaming
STEP_OVERHEAD_S = 0.001      # scheduling, input preparation, launch and sampling per step: with
#                              it a one-sequence decode of Llama-3.1-8B on an H100 costs 6.3 ms
ALL_REDUCE_LATENCY_S = 10e-6  # fixed cost of one all-reduce across the tensor-parallel group
#                               (a small-message NVLink all-reduce takes microseconds)
ACTIVATION_BYTES = 2          # activations travel between GPUs in BF16


class RooflineClock:
    """Step time of a batch on `config.gpu` running `config.model`, from FLOPs and bytes."""

    def __init__(self, config: EngineConfig):
        model, gpu = lookup(config)
        tp = config.tensor_parallel_size
        self.tensor_parallel_size = tp
        weight_element_bytes = DTYPE_BYTES[model.weight_dtype]
        # Per GPU: tensor parallelism splits every matrix and every KV head group tp ways.
        self.linear_params = model.num_linear_params / tp
        self.lm_head_params = model.vocab_size * model.hidden_size / tp
        self.weight_bytes_per_step = (self.linear_params * weight_element_bytes
                                      + self.lm_head_params * 2)
        self.attention_flops_per_pair = 4 * model.num_layers * model.num_heads * model.head_dim / tp
        self.kv_bytes_per_token = model.kv_bytes_per_token(config.kv_cache_dtype) / tp
        fp8_linear = model.weight_dtype == "fp8" and gpu.fp8_tflops is not None
        linear_tflops = gpu.fp8_tflops if fp8_linear else gpu.bf16_tflops
        self.linear_flops_per_s = linear_tflops * 1e12 * COMPUTE_EFFICIENCY
        self.bf16_flops_per_s = gpu.bf16_tflops * 1e12 * COMPUTE_EFFICIENCY
        self.bytes_per_s = gpu.memory_bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY
        self.all_reduce_bytes_per_token = model.hidden_size * ACTIVATION_BYTES
        self.all_reduces_per_step = 2 * model.num_layers  # after attention and after the MLP
        self.link_bytes_per_s = gpu.interconnect_gbs * 1e9

    def step_time_s(self, batch: SchedulerOutput) -> float:
        return self.price(batch.num_scheduled_tokens, batch.num_seqs, batch.num_attention_pairs,
                          batch.num_context_tokens)

    def decode_step_time_s(self, num_seqs: int, num_context_tokens: int) -> float:
        """A step of `num_seqs` decodes only: what step_time_s prices such a batch at."""
        return self.price(num_seqs, num_seqs, num_context_tokens + num_seqs, num_context_tokens)

    def price(self, num_tokens: int, num_seqs: int, num_pairs: int,
              num_context_tokens: int) -> float:
        """Seconds for one step computing `num_tokens` new tokens of `num_seqs` sequences."""
        gemm_flops = 2 * self.linear_params * num_tokens
        lm_head_flops = 2 * self.lm_head_params * num_seqs  # logits only for the last token
        gemm_s = max(gemm_flops / self.linear_flops_per_s + lm_head_flops / self.bf16_flops_per_s,
                     self.weight_bytes_per_step / self.bytes_per_s)
        kv_bytes = self.kv_bytes_per_token * (num_context_tokens + num_tokens)
        attention_s = max(self.attention_flops_per_pair * num_pairs / self.bf16_flops_per_s,
                          kv_bytes / self.bytes_per_s)
        return gemm_s + attention_s + self.all_reduce_s(num_tokens) + STEP_OVERHEAD_S

    def all_reduce_s(self, num_tokens: int) -> float:
        """Ring all-reduce of the hidden states, twice per layer: 2 (tp-1)/tp of the bytes each."""
        tp = self.tensor_parallel_size
        if tp == 1:
            return 0.0
        payload = self.all_reduce_bytes_per_token * num_tokens * 2 * (tp - 1) / tp
        return self.all_reduces_per_step * (ALL_REDUCE_LATENCY_S + payload / self.link_bytes_per_s)


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


def make_clock(config: EngineConfig):
    return LinearClock(config) if config.forward_model == "linear" else RooflineClock(config)
