"""The advice beside a memory plan that does not fit: the one-flag changes that would.

gpu_memory.plan_memory refuses a config as vLLM does at start-up (DoesNotFit: the problem, and
which settings could mend it); this file, the command line's, tries each candidate change of one
flag and keeps those whose changed config validates and plans, so following the advice always
works:

    ...; any one of these fits: --max-model-len 5328, --gpu h200 (or b200, mi300x)
"""

from dataclasses import replace
from typing import Optional

from config import (CUDA_BLOCK_SIZE_MULTIPLE, MAX_NUM_GPU_BLOCKS, MAX_TOKENS, ConfigError,
                    EngineConfig, flag_name, valid_tensor_parallel_sizes)
from gpu_memory import DoesNotFit, MemoryPlan, plan_memory
from kv_cache import num_blocks_for
from presets import GPUS


def advised_plan(config: EngineConfig,
                 enable_chunked_prefill: Optional[bool] = None) -> MemoryPlan:
    """plan_memory, its refusal followed by the changes that would fit, each one alone: every
    one of them is tried, and passes (`enable_chunked_prefill`: as plan_memory takes it)."""
    try:
        return plan_memory(config, enable_chunked_prefill)
    except DoesNotFit as refusal:
        raise ConfigError(refusal.problem + _advice(config, refusal.remedies,
                                                    enable_chunked_prefill)) from None


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
        plan_memory(changed, enable_chunked_prefill)
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
        plan_memory(config)
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
