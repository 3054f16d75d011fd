"""The serving flags: one dataclass of engine knobs, named and defaulted as vLLM names them.

Every field maps 1:1 to a command-line flag (`max_num_seqs` <-> `--max-num-seqs`). Where
servesim's default differs from vLLM's, the comment says why. `validate()` turns a bad
combination into one `ConfigError` line that names the problem and what would be valid; the
CLI prints it and exits with status 2, as `vllm serve` refuses such a config at start-up.
"""

from dataclasses import dataclass
from typing import Optional

# With chunked prefill on, servesim slices prompts into the lesson's ~512-token chunks. vLLM V0
# used 512 too; V1's `vllm serve` defaults to 2048 (8192 on GPUs with >= 70 GiB, A100 excepted),
# see vllm/engine/arg_utils.py `get_batch_defaults`. Exercise 2 asks which value suits.
DEFAULT_CHUNKED_PREFILL_BUDGET = 512
# With chunked prefill off, vLLM sets the budget to max(max_model_len, 2048) so that any prompt
# fits into one step (vllm/config/scheduler.py).
MIN_UNCHUNKED_BUDGET = 2048


class ConfigError(ValueError):
    """A configuration vLLM would refuse at start-up; the message is one line for the user."""


@dataclass
class EngineConfig:
    # -- the model and the hardware it runs on (see presets.py) --
    model: str = "llama-3.3-70b-fp8"    # the lesson's model ...
    gpu: str = "h200"                   # ... on the card where it fits (an H100 cannot hold its KV)
    tensor_parallel_size: int = 1       # GPUs the weights and KV are split across
    gpu_memory_utilization: float = 0.9  # share of HBM vLLM may use: weights + activations + KV
    kv_cache_dtype: str = "auto"        # "auto" = the model's activation dtype, or "fp8"
    # -- PagedAttention --
    block_size: int = 16                # tokens per KV block
    num_gpu_blocks_override: Optional[int] = None  # usable KV blocks, instead of computing them
    max_model_len: int = 8192           # prompt + output cap per request. vLLM defaults to the
    #                                     model's context (131,072 for Llama 3.3); 8192 is the
    #                                     lesson's per-request reservation
    # -- the scheduler --
    max_num_seqs: int = 256             # most requests running at once; STATIC's batch size
    max_num_batched_tokens: Optional[int] = None  # token budget per step; None: 512 with chunked
    #                                     prefill, max(max_model_len, 2048) without
    long_prefill_token_threshold: int = 0  # >0 caps one request's prompt tokens per step
    batching_window_ms: float = 10.0    # STATIC: how long the oldest request waits for a full batch
    # -- the virtual clock (forward_model.py) --
    forward_model: str = "roofline"     # "roofline" (honest) or "linear" (the lesson toy's clock)
    linear_step_ms: float = 0.2         # linear clock: fixed cost per step (the toy's constant)
    linear_prefill_token_ms: float = 0.04  # linear clock: per prompt token in the step
    linear_decode_token_ms: float = 0.5    # linear clock: per decode token in the step

    def token_budget(self, enable_chunked_prefill: bool) -> int:
        """`max_num_batched_tokens` as the scheduler sees it, with vLLM's default when unset."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        if enable_chunked_prefill:
            return DEFAULT_CHUNKED_PREFILL_BUDGET
        return max(self.max_model_len, MIN_UNCHUNKED_BUDGET)

    def validate(self) -> None:
        """Refuse values no engine could run with, naming what would be valid."""
        _require_positive("--block-size", self.block_size)
        _require_positive("--max-model-len", self.max_model_len)
        _require_positive("--max-num-seqs", self.max_num_seqs)
        _require_positive("--tensor-parallel-size", self.tensor_parallel_size)
        if self.max_num_batched_tokens is not None:
            _require_positive("--max-num-batched-tokens", self.max_num_batched_tokens)
        if self.num_gpu_blocks_override is not None:
            _require_positive("--num-gpu-blocks-override", self.num_gpu_blocks_override)
        if self.long_prefill_token_threshold < 0:
            raise ConfigError("--long-prefill-token-threshold must be >= 0 (0 turns the cap off), "
                              f"got {self.long_prefill_token_threshold}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError("--gpu-memory-utilization must be in (0, 1], "
                              f"got {self.gpu_memory_utilization}")
        if self.kv_cache_dtype not in ("auto", "fp8"):
            raise ConfigError(f"--kv-cache-dtype must be auto or fp8, got {self.kv_cache_dtype!r}")
        if self.batching_window_ms < 0:
            raise ConfigError(f"--batching-window-ms must be >= 0, got {self.batching_window_ms}")
        if self.forward_model not in ("roofline", "linear"):
            raise ConfigError("--forward-model must be roofline or linear, "
                              f"got {self.forward_model!r}")
        for flag, value in (("--linear-step-ms", self.linear_step_ms),
                            ("--linear-prefill-token-ms", self.linear_prefill_token_ms),
                            ("--linear-decode-token-ms", self.linear_decode_token_ms)):
            if value < 0:
                raise ConfigError(f"{flag} must be >= 0, got {value}")

    def validate_unchunked_budget(self) -> None:
        """Without chunked prefill every prompt runs whole, so the budget must hold the longest.

        vLLM refuses `--no-enable-chunked-prefill` with `max_num_batched_tokens < max_model_len`
        at start-up for the same reason: otherwise a long prompt could never be scheduled.
        """
        budget = self.token_budget(enable_chunked_prefill=False)
        if budget < self.max_model_len:
            raise ConfigError(
                f"--max-num-batched-tokens {budget} is below --max-model-len {self.max_model_len}: "
                "with chunked prefill off a whole prompt must fit in one step (vLLM refuses this "
                "too); raise the budget, lower --max-model-len, or leave out mode continuous")


def _require_positive(flag: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value}")
