"""The serving flags: one frozen dataclass of engine knobs, named and defaulted as vLLM names them.

Every field maps 1:1 to a command-line flag (`max_num_seqs` <-> `--max-num-seqs`), except
`default_chunked_budget`, which only the knob `MAX_NUM_BATCHED_TOKENS` in code/main.py sets
(and `speculative_config` also holds servesim's `--spec-acceptance-rate`). Where
servesim's default differs from vLLM's, the comment says why. `validate()` turns a bad value into
one `ConfigError` line that names the setting and what would be valid; the CLI prints it and exits
with status 2, as `vllm serve` refuses such a config at start-up.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:  # spec_decode imports this module for ConfigError
    from spec_decode import SpeculativeConfig

# With chunked prefill on, servesim slices prompts into the lesson's ~512-token chunks. vLLM V0
# used 512 too; V1's `vllm serve` defaults to 2048 (8192 on GPUs with >= 70 GiB, A100 excepted),
# see vllm/engine/arg_utils.py `get_batch_defaults`. Exercise 2 asks which value suits.
DEFAULT_CHUNKED_PREFILL_BUDGET = 512
# With chunked prefill off, vLLM sets the budget to max(max_model_len, 2048) so that any prompt
# fits into one step (vllm/config/scheduler.py).
MIN_UNCHUNKED_BUDGET = 2048


class ConfigError(ValueError):
    """A configuration vLLM would refuse at start-up; the message is one line for the user."""


def flag_name(field_name: str) -> str:
    """`max_num_seqs` -> `--max-num-seqs`: how a setting is named when a flag set it."""
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
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
    enable_prefix_caching: bool = True  # full blocks found by their tokens' hash are reused
    #                                     (vLLM V1's default; the continuous modes only)
    max_model_len: int = 8192           # prompt + output cap per request. vLLM defaults to the
    #                                     model's context (131,072 for Llama 3.3); 8192 is the
    #                                     lesson's per-request reservation
    # -- the scheduler --
    max_num_seqs: int = 256             # most requests running at once; STATIC's batch size
    max_num_batched_tokens: Optional[int] = None  # token budget per step of every continuous
    #                                     mode; None: default_chunked_budget with chunked prefill,
    #                                     max(max_model_len, 2048) without (vLLM's rule)
    default_chunked_budget: int = DEFAULT_CHUNKED_PREFILL_BUDGET  # CONTINUOUS+CHUNKED's budget
    #                                     when --max-num-batched-tokens is not given: the lesson's
    #                                     512-token slice (knob MAX_NUM_BATCHED_TOKENS)
    long_prefill_token_threshold: int = 0  # >0 caps one request's prompt tokens per step
    speculative_config: Optional["SpeculativeConfig"] = None  # --speculative-config
    #                                     (spec_decode.py); None: no speculative decoding
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
            return self.default_chunked_budget
        return max(self.max_model_len, MIN_UNCHUNKED_BUDGET)

    def validate(self, name: Callable[[str], str] = flag_name) -> None:
        """Refuse values no engine could run with, naming what would be valid.

        `name(field)` says how the user set a field: a flag (`--block-size`) or a knob in
        code/main.py (`BLOCK_SIZE`), so that the message points where the value was typed.
        """
        for field_name in ("block_size", "max_model_len", "max_num_seqs", "tensor_parallel_size",
                           "default_chunked_budget"):
            _require_positive(name(field_name), getattr(self, field_name))
        for field_name in ("max_num_batched_tokens", "num_gpu_blocks_override"):
            if getattr(self, field_name) is not None:
                _require_positive(name(field_name), getattr(self, field_name))
        if self.long_prefill_token_threshold < 0:
            raise ConfigError(f"{name('long_prefill_token_threshold')} must be >= 0 (0 turns the "
                              f"cap off), got {self.long_prefill_token_threshold}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"{name('gpu_memory_utilization')} must be in (0, 1], "
                              f"got {self.gpu_memory_utilization}")
        if self.kv_cache_dtype not in ("auto", "fp8"):
            raise ConfigError(f"{name('kv_cache_dtype')} must be auto or fp8, "
                              f"got {self.kv_cache_dtype!r}")
        if self.batching_window_ms < 0:
            raise ConfigError(f"{name('batching_window_ms')} must be >= 0, "
                              f"got {self.batching_window_ms}")
        if self.forward_model not in ("roofline", "linear"):
            raise ConfigError(f"{name('forward_model')} must be roofline or linear, "
                              f"got {self.forward_model!r}")
        for field_name in ("linear_step_ms", "linear_prefill_token_ms", "linear_decode_token_ms"):
            if getattr(self, field_name) < 0:
                raise ConfigError(f"{name(field_name)} must be >= 0, "
                                  f"got {getattr(self, field_name)}")
        if self.speculative_config is not None:
            self.speculative_config.validate(self.model, self.tensor_parallel_size)

    def validate_unchunked_budget(self, name: Callable[[str], str] = flag_name) -> None:
        """Without chunked prefill every prompt runs whole, so the budget must hold the longest.

        vLLM refuses `--no-enable-chunked-prefill` with `max_num_batched_tokens < max_model_len`
        at start-up for the same reason: otherwise a long prompt could never be scheduled.
        """
        budget = self.token_budget(enable_chunked_prefill=False)
        if budget < self.max_model_len:
            raise ConfigError(
                f"{name('max_num_batched_tokens')} {budget} is below --max-model-len "
                f"{self.max_model_len}: with chunked prefill off a whole prompt must fit in one "
                "step (vLLM refuses this too); raise the budget, lower --max-model-len, or leave "
                "out mode continuous")


@dataclass(frozen=True)
class Knobs:
    """The exercise knobs at the top of code/main.py: what every command starts from.

    A flag given on the command line overrides its knob for that run. A refusal caused by a knob
    names the knob, since that is where the learner typed the value.
    """
    compared_modes: tuple = ("naive", "static", "continuous", "chunked")  # compare's rows
    max_num_batched_tokens: int = DEFAULT_CHUNKED_PREFILL_BUDGET  # CONTINUOUS+CHUNKED's budget
    block_size: int = 16
    max_num_seqs: int = 256

    # EngineConfig field -> the knob in code/main.py that sets it when its flag is not given.
    FIELD_KNOBS = {"default_chunked_budget": "MAX_NUM_BATCHED_TOKENS", "block_size": "BLOCK_SIZE",
                   "max_num_seqs": "MAX_NUM_SEQS"}

    def engine_defaults(self) -> dict:
        """The EngineConfig fields the knobs set, by field name."""
        return {"default_chunked_budget": self.max_num_batched_tokens,
                "block_size": self.block_size, "max_num_seqs": self.max_num_seqs}

    @staticmethod
    def name(field_name: str) -> str:
        """How a refusal names a knob-set field: `BLOCK_SIZE in code/main.py`."""
        return f"{Knobs.FIELD_KNOBS[field_name]} in code/main.py"


def _require_positive(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value}")
