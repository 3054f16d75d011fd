"""How vLLM splits a GPU's memory: weights, an activation reserve, and what is left for KV blocks.

    torch total x --gpu-memory-utilization           the share vLLM may use, per GPU
      - weights / tensor_parallel_size               loaded first
      - activation reserve                           peak of a profiling forward pass + runtime
      = KV cache memory  ->  // (block_size x KV bytes per token)  ->  num_gpu_blocks

The activation reserve is servesim's model of what vLLM measures by profiling. vLLM V1 runs a
dummy forward pass of `max_num_batched_tokens` tokens, the step budget, and a sampler pass over
`max_num_seqs` requests (`GPUModelRunner.profile_run`, vllm/v1/worker/gpu_model_runner.py, 0.30.0),
and records the peak; the largest tensors of that pass are the MLP's gate/up output and its
activation (3 x intermediate_size values per token, 16-bit) and the sampler's FP32 logits
(max_num_seqs x vocab). The pass is sized by the budget, not by `max_model_len`: at a 131,072-token
context with chunked prefill's 8,192-token budget it profiles 8,192 tokens (V0, and V1 with
chunked prefill off, set the budget to at least max_model_len, so there the two agree). Memory outside torch's allocator (CUDA
context, cuBLAS and NCCL workspaces, CUDA-graph pools) is charged as a flat 1 GiB. With these,
Llama-3.3-70B FP8 on one H100 at utilization 0.95 with FP8 KV gets 5.13 GiB of KV (33,600
tokens); vLLM printed 5.11 GiB (33,504 tokens) for that setup.

With speculative decoding an EAGLE head or a draft model is loaded beside the target, and its
layers keep their KV in the same blocks as the target's (vLLM puts them in one KV-cache group):
the drafter's weights come off the memory first, and every cached token holds the drafter's KV
too (Llama-3.2-1B drafting for Llama-3.1-8B: 32 KiB on top of 128 KiB). The drafter's own
activations are left out of the reserve.

`--num-gpu-blocks-override` skips all of this, as in vLLM. With tensor parallelism each GPU holds
its share of the KV heads, and at least one (more GPUs than KV heads: each keeps a copy).

Weights that do not fit, or a pool that cannot hold one `--max-model-len` sequence, are refused as
vLLM refuses them at start-up, and so is a pool of more blocks than servesim keeps in memory
(config.MAX_NUM_GPU_BLOCKS). The refusal lists the one-flag changes that would fit: each is
planned and validated here before it is suggested, so following the advice always works.
"""

from dataclasses import dataclass, replace
from typing import Optional

from config import (CUDA_BLOCK_SIZE_MULTIPLE, MAX_NUM_GPU_BLOCKS, MAX_TOKENS, ConfigError,
                    EngineConfig, flag_name, valid_tensor_parallel_sizes)
from kv_cache import num_blocks_for
from presets import DTYPE_BYTES, GPUS, GpuSpec, ModelSpec, model_spec, with_precision

GIB = 2**30
NON_TORCH_MEMORY_BYTES = 1 * GIB  # CUDA context, library workspaces, CUDA graphs (see above)
LOGITS_BYTES = 4                   # the sampler works on FP32 logits


@dataclass(frozen=True)
class MemoryPlan:
    """One GPU's memory as vLLM lays it out (with tensor parallelism, every GPU looks alike)."""
    usable_bytes: int             # torch total x gpu_memory_utilization
    weight_bytes: int             # this GPU's shard of the weights (a drafter's included)
    activation_reserve_bytes: int
    kv_bytes_per_token: int       # this GPU's shard of one token's keys and values (target's
    #                               layers, and a drafter's)
    block_size: int
    num_gpu_blocks: int           # KV blocks in the pool (of every data-parallel rank)
    overridden: bool = False      # num_gpu_blocks came from --num-gpu-blocks-override
    num_ranks: int = 1            # data-parallel attention ranks pooled into one engine (moe.py)

    @property
    def kv_cache_bytes(self) -> int:
        """One GPU's KV cache."""
        return self.num_gpu_blocks // self.num_ranks * self.block_size * self.kv_bytes_per_token

    @property
    def kv_cache_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


def lookup(config: EngineConfig) -> tuple[ModelSpec, GpuSpec]:
    """The model as --quantization and --dtype load it, and the GPU (the config is validated)."""
    if config.gpu not in GPUS:
        raise ConfigError(f"unknown --gpu {config.gpu!r}; choose one of {', '.join(GPUS)}")
    model = with_precision(model_spec(config.model), config.quantization, config.dtype)
    return model, GPUS[config.gpu]


def profile_num_tokens(config: EngineConfig, enable_chunked_prefill: Optional[bool]) -> int:
    """Tokens in vLLM's profiling pass: the token budget the engine runs with
    (`config.token_budget`), for chunked prefill on or off; None: a pool shared by both
    continuous modes (compare's), sized for the larger of their budgets."""
    if enable_chunked_prefill is None:
        return max(config.token_budget(True), config.token_budget(False))
    return config.token_budget(enable_chunked_prefill)


def activation_reserve_bytes(model: ModelSpec, config: EngineConfig,
                             enable_chunked_prefill: Optional[bool] = None) -> int:
    """Peak activations of vLLM's profiling pass, per GPU, plus memory outside torch."""
    profile_tokens = profile_num_tokens(config, enable_chunked_prefill)
    mlp = profile_tokens * 3 * model.intermediate_size * 2 // config.tensor_parallel_size
    logits = config.max_num_seqs * model.vocab_size * LOGITS_BYTES
    return mlp + logits + NON_TORCH_MEMORY_BYTES


def sliding_window_reserve_bytes(model: ModelSpec, config: EngineConfig) -> int:
    """The sliding-window layers' KV (gpt-oss: 128 tokens in half its layers), set aside for
    every sequence that may run: `max_num_seqs` x (the window's blocks + one being filled).

    vLLM's hybrid KV-cache manager keeps these layers in a KV-cache group of their own and
    frees a sequence's blocks once they slide out of the window; servesim's pool counts the
    full-attention layers per token and reserves the window's blocks up front instead (as
    many as vLLM would hold with every seat taken)."""
    if model.num_sliding_layers == 0:
        return 0
    window_tokens = (num_blocks_for(model.sliding_window, config.block_size) + 1) * config.block_size
    per_token = model.sliding_kv_bytes_per_token(config.kv_cache_dtype)
    per_token_per_gpu = per_token * model.kv_bytes_per_token_per_gpu(
        config.kv_cache_dtype, config.tensor_parallel_size) // model.kv_bytes_per_token(
        config.kv_cache_dtype)
    return config.max_num_seqs * window_tokens * per_token_per_gpu


def plan_memory(config: EngineConfig, enable_chunked_prefill: Optional[bool] = None) -> MemoryPlan:
    """Size the KV pool; refuse, as vLLM does, when the weights or one sequence do not fit (and,
    as servesim must, a pool of more blocks than it keeps in memory). A refusal names the
    changes that would fit, each one alone: every one of them is tried, and passes.
    `enable_chunked_prefill` picks the token budget vLLM profiles with (see
    `profile_num_tokens`)."""
    try:
        return _plan(config, enable_chunked_prefill)
    except DoesNotFit as refusal:
        raise ConfigError(refusal.problem + _advice(config, refusal.remedies,
                                                    enable_chunked_prefill)) from None


class DoesNotFit(ConfigError):
    """A plan that does not fit: what is wrong, and which settings could mend it."""

    def __init__(self, problem: str, remedies: tuple):
        super().__init__(problem)
        self.problem = problem
        self.remedies = remedies  # names of the candidate functions below, in the order to try


def _plan(config: EngineConfig, enable_chunked_prefill: Optional[bool] = None) -> MemoryPlan:
    plan = memory_layout(config, enable_chunked_prefill)
    if not plan.overridden:
        weights, reserve = plan.weight_bytes, plan.activation_reserve_bytes
        usable = plan.usable_bytes
        if weights + reserve >= usable:
            model, gpu = lookup(config)
            raise DoesNotFit(
                f"{config.model} needs {weights / GIB:.1f} GiB of weights + {reserve / GIB:.1f} "
                f"GiB activation reserve per GPU, but {gpu.name} x "
                f"{config.gpu_memory_utilization} gives {usable / GIB:.1f} GiB",
                ("utilization", "tensor_parallel", "gpu", "fewer_seqs", "shorter_len",
                 "smaller_budget"))
        if plan.num_gpu_blocks > MAX_NUM_GPU_BLOCKS:
            raise DoesNotFit(
                f"the KV cache would have {plan.num_gpu_blocks:,} blocks of {config.block_size}, "
                f"more than the {MAX_NUM_GPU_BLOCKS:,} servesim keeps in memory",
                ("larger_block", "fewest_blocks"))
    if plan.kv_cache_tokens // plan.num_ranks < config.max_model_len:
        raise DoesNotFit(
            f"the KV cache holds {plan.kv_cache_tokens:,} tokens ({plan.num_gpu_blocks} blocks of "
            f"{config.block_size}), less than one --max-model-len {config.max_model_len} sequence",
            ("max_model_len", "kv_cache_dtype", "smaller_block", "more_blocks", "utilization",
             "tensor_parallel", "gpu"))
    return plan


def memory_layout(config: EngineConfig,
                  enable_chunked_prefill: Optional[bool] = None) -> MemoryPlan:
    """The memory as vLLM would lay it out, refusing nothing (`plan_memory` refuses): weights
    that do not fit leave no KV blocks. `diagnose` reads it to say why a config cannot start."""
    model, gpu = lookup(config)
    tp = config.tensor_parallel_size
    usable = int(gpu.memory_gib * GIB * config.gpu_memory_utilization)
    weights = weight_bytes_per_gpu(model, config)
    reserve = (activation_reserve_bytes(model, config, enable_chunked_prefill)
               + sliding_window_reserve_bytes(model, config))
    kv_per_token = model.kv_bytes_per_token_per_gpu(config.kv_cache_dtype, tp)
    speculative = config.speculative_config
    drafter = speculative.drafter_model(model) if speculative else None
    if drafter is not None:
        draft_tp = speculative.draft_tp(tp)
        weights += drafter.weight_bytes // draft_tp
        kv_per_token += drafter.kv_bytes_per_token_per_gpu(config.kv_cache_dtype, draft_tp)
    ranks = config.data_parallel_size
    if config.num_gpu_blocks_override is not None:
        num_blocks = config.num_gpu_blocks_override
    else:
        num_blocks = ranks * max(0, (usable - weights - reserve)
                                 // (kv_per_token * config.block_size))
    return MemoryPlan(usable, weights, reserve, kv_per_token, config.block_size, num_blocks,
                      overridden=config.num_gpu_blocks_override is not None, num_ranks=ranks)


def weight_bytes_per_gpu(model: ModelSpec, config: EngineConfig) -> int:
    """This GPU's weights: a 1/tp share of everything; with data-parallel attention ranks
    (expert parallelism over tp x dp GPUs) the attention and dense weights are each rank's
    own copy and only the routed experts are spread over all tp x dp GPUs."""
    tp, dp = config.tensor_parallel_size, config.data_parallel_size
    if dp == 1:
        return model.weight_bytes // tp
    expert_bytes = model.num_expert_params * DTYPE_BYTES[model.expert_dtype]
    return int((model.weight_bytes - expert_bytes) / tp + expert_bytes / (tp * dp))


# -- advice: each candidate a change of one flag, kept only if the changed config plans ---------

def _advice(config: EngineConfig, remedies: tuple, enable_chunked_prefill: Optional[bool]) -> str:
    advice = [text for text in (_first_that_fits(config, remedy, enable_chunked_prefill)
                                for remedy in remedies) if text]
    if not advice:
        return "; no change of one setting servesim can suggest makes it fit"
    return "; any one of these fits: " + ", ".join(advice)


def _first_that_fits(config: EngineConfig, remedy: str,
                     enable_chunked_prefill: Optional[bool]) -> Optional[str]:
    """The first candidate of `remedy` that validates and plans, as flag text (GPUs: all)."""
    fitting = [text for text, changes in CANDIDATES[remedy](config)
               if _fits(config, changes, enable_chunked_prefill)]
    if remedy == "gpu" and fitting:
        others = f" (or {', '.join(fitting[1:])})" if fitting[1:] else ""
        return f"--gpu {fitting[0]}{others}"
    return fitting[0] if fitting else None


def _fits(config: EngineConfig, changes: dict, enable_chunked_prefill: Optional[bool]) -> bool:
    changed = replace(config, **changes)
    try:
        changed.validate()
        _plan(changed, enable_chunked_prefill)
    except ConfigError:
        return False
    return True


def _utilizations(config):
    for value in (0.9, 0.95):
        if value > config.gpu_memory_utilization:
            yield f"--gpu-memory-utilization {value}", {"gpu_memory_utilization": value}


def _tensor_parallel_sizes(config):
    for tp in valid_tensor_parallel_sizes(config.model):
        if tp > config.tensor_parallel_size:
            yield f"--tensor-parallel-size {tp}", {"tensor_parallel_size": tp}


def _gpus(config):
    for key in GPUS:
        if key != config.gpu:
            yield key, {"gpu": key}


def _max_model_lens(config):
    """The longest max_model_len whose sequence the pool holds. Found by halving the interval:
    the pool itself changes with max_model_len, which sizes the profiling pass when chunked
    prefill is off (a shorter cap, a smaller reserve, a larger pool)."""
    fits, too_long = 0, config.max_model_len
    while too_long - fits > 1:
        middle = (fits + too_long) // 2
        if _holds_one_sequence(replace(config, max_model_len=middle)):
            fits = middle
        else:
            too_long = middle
    if fits > 0:
        yield f"--max-model-len {fits}", {"max_model_len": fits}


def _holds_one_sequence(config: EngineConfig) -> bool:
    try:
        _plan(config)
    except ConfigError:
        return False
    return True


def _kv_cache_dtypes(config):
    if config.kv_cache_dtype != "fp8":
        yield "--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}


def _smaller_blocks(config):
    if config.block_size > CUDA_BLOCK_SIZE_MULTIPLE:
        yield f"--block-size {CUDA_BLOCK_SIZE_MULTIPLE}", {"block_size": CUDA_BLOCK_SIZE_MULTIPLE}


def _larger_blocks(config):
    block_size = config.block_size * 2
    while block_size <= MAX_TOKENS:
        yield f"--block-size {block_size}", {"block_size": block_size}
        block_size *= 2


def _more_blocks(config):
    """An override that holds one sequence (only where the user gave an override: else vLLM
    sizes the pool from memory, and more blocks than that would not be there)."""
    if config.num_gpu_blocks_override is not None:
        blocks = num_blocks_for(config.max_model_len, config.block_size)
        yield f"--num-gpu-blocks-override {blocks}", {"num_gpu_blocks_override": blocks}


def _fewest_blocks(config):
    """The most blocks servesim keeps: fewer than memory holds, so honest about memory."""
    yield (f"--num-gpu-blocks-override {MAX_NUM_GPU_BLOCKS}",
           {"num_gpu_blocks_override": MAX_NUM_GPU_BLOCKS})


def _default_of(field_name: str, default: int):
    """A setting that grows the activation reserve, back at the lesson's default."""
    def candidates(config):
        value = getattr(config, field_name)
        if value is not None and value > default:
            yield f"{flag_name(field_name)} {default}", {field_name: default}
    return candidates


CANDIDATES = {"utilization": _utilizations, "tensor_parallel": _tensor_parallel_sizes,
              "gpu": _gpus, "max_model_len": _max_model_lens, "kv_cache_dtype": _kv_cache_dtypes,
              "smaller_block": _smaller_blocks, "larger_block": _larger_blocks,
              "more_blocks": _more_blocks, "fewest_blocks": _fewest_blocks,
              "fewer_seqs": _default_of("max_num_seqs", EngineConfig.max_num_seqs),
              "shorter_len": _default_of("max_model_len", EngineConfig.max_model_len),
              "smaller_budget": _default_of("max_num_batched_tokens", 8192)}
