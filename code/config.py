"""The serving flags: one frozen dataclass of engine knobs, named and defaulted as vLLM names them.

Every field maps 1:1 to a command-line flag (`max_num_seqs` <-> `--max-num-seqs`), except
`default_chunked_budget`, which only the knob `MAX_NUM_BATCHED_TOKENS` in code/main.py sets
(and `speculative_config` also holds servesim's `--spec-acceptance-rate`). Where servesim's
default differs from vLLM's, the comment says why.

Validation lives here, in one place, before anything runs. `validate()` turns a bad value into one
`ConfigError` line that names the setting, the value and what would be valid; the CLI prints it
and exits with status 2, as `vllm serve` refuses such a config at start-up. It has two layers:

    FIELD_RULES    every field's own rule: a `Range` for a number (type, lowest and highest
                   valid value, and why the bounds), a `Choice` for a name, a `Switch` for on/off,
                   `Parsed` for a setting its own module parses and checks (--speculative-config)
    _check_...     vLLM's start-up refusals that tie fields together, one function each, citing
                   the vLLM 0.30.0 file the rule comes from (and where 0.18.0 differed)

To bring a new flag under it: add its field to EngineConfig, its row to FIELD_RULES (a sane upper
bound where vLLM has none, saying why; a test fails while a field has no row), and, if vLLM
refuses combinations with it, one `_check_...` function called from `validate()`. A rule for one
mode only (the token budget of a continuous mode) is `validate_scheduler`, which the mode calls.
Workload flags use the same `Range` (workload.py); flags that only shape the output are checked in
commands/flags.py. A refusal that advises a value advises one that passes these checks.
"""

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:  # spec_decode imports this module for ConfigError
    from spec_decode import SpeculativeConfig

from engine_overhead import DEFAULT_VERSION, VERSIONS
from model_config import ModelConfigError
from presets import DTYPES, GPUS, MODELS, QUANTIZATIONS, checkpoint_quantization, model_spec

# With chunked prefill on, servesim slices prompts into the lesson's ~512-token chunks. vLLM V0
# used 512 too; V1's `vllm serve` defaults to 2048 (8192 on GPUs with >= 70 GiB, A100 excepted),
# see vllm/engine/arg_utils.py `get_batch_defaults`. Exercise 2 asks which value suits.
DEFAULT_CHUNKED_PREFILL_BUDGET = 512
# With chunked prefill off, vLLM sets the budget to max(max_model_len, 2048) so that any prompt
# fits into one step (vllm/config/scheduler.py).
MIN_UNCHUNKED_BUDGET = 2048

# Upper bounds where vLLM has none: far past any real setting, low enough that nothing overflows
# or fills the memory. Token counts: 10 million is 76x the longest context of any preset model.
MAX_TOKENS = 10_000_000
MAX_NUM_SEQS = 1_000_000
# Every KV block of the pool is an entry in memory (kv_cache.py): 2^20 blocks are ~16.8 million
# tokens at block size 16, more than any preset holds on one GPU (the most: 692,153 blocks, the 1B
# draft model on an MI300X with FP8 KV), and ~45 MB of free list.
MAX_NUM_GPU_BLOCKS = 2**20
MAX_MS = 60_000.0  # a minute: for a step, a token, or STATIC's wait for a full batch
# The linear clock's shortest step (one token) must move the clock: at least a nanosecond.
MIN_LINEAR_STEP_MS = 1e-6
# Block sizes. vLLM 0.30.0's config takes any positive size (vllm/config/cache.py `gt=0`), and its
# scheduler, which servesim is, runs any; the attention kernels are pickier. On CUDA and ROCm
# they take multiples of 16 (FlashAttention, Triton, FlexAttention `MultipleOf(16)`, FlashInfer
# 16, 32 or 64: vllm/v1/attention/backends/; a size no backend runs fails at start-up, "No
# common block size", vllm/v1/worker/utils.py), and vLLM's command line once offered exactly
# 1, 8, 16, 32, 64 and 128. servesim takes a multiple of 16, or a power of two below it (1, 2,
# 4, 8: the old list's small sizes, and the small pools of worked examples and of the oracle's
# scenarios, whose scheduler runs them), and refuses sizes no vLLM ever ran, such as 12 or 24.
SMALL_BLOCK_SIZES = (1, 2, 4, 8)
CUDA_BLOCK_SIZE_MULTIPLE = 16


class ConfigError(ValueError):
    """A configuration vLLM would refuse at start-up; the message is one line for the user."""


def flag_name(field_name: str) -> str:
    """`max_num_seqs` -> `--max-num-seqs`: how a setting is named when a flag set it."""
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class Range:
    """The values a numeric setting may take; `check` refuses anything else in one line:

        --max-model-len must be an integer in [1, 10,000,000] tokens, got 0

    `high` math.inf means no upper bound (infinity itself is valid only with `allow_inf`).
    """
    low: float
    high: float
    integer: bool = False
    above_low: bool = False       # low itself is not valid: (low, high]
    below_high: bool = False      # high itself is not valid: [low, high)
    multiple_of: int = 1
    also: tuple = ()              # integers valid besides the range's multiples (block sizes)
    allow_inf: bool = False       # --request-rate inf: everything at t=0
    optional: bool = False        # None means "not set"
    unit: str = ""                # "ms", "tokens": said after the bounds
    why: str = ""                 # where the bounds come from, when it is not obvious

    def contains(self, value) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        if value == math.inf:
            return self.allow_inf
        if value in self.also:
            return True
        above = value > self.low if self.above_low else value >= self.low  # False for NaN
        below = value < self.high if self.below_high else value <= self.high
        return above and below and (not self.integer or value % self.multiple_of == 0)

    def check(self, name: str, value, error: type = ConfigError) -> None:
        if not self.contains(value):
            raise error(f"{name} must be {self.describe()}, got {value!r}")

    def describe(self) -> str:
        """'an integer in [1, 10,000,000]', 'a number > 0, or inf', 'a number in (0, 1]'."""
        if self.multiple_of > 1:
            kind = f"a multiple of {self.multiple_of}"
            if self.also:
                kind = f"{', '.join(map(str, self.also))} or {kind}"
        else:
            kind = "an integer" if self.integer else "a number"
        if self.high == math.inf:
            text = f"{kind} {'>' if self.above_low else '>='} {_number(self.low)}"
        else:
            text = (f"{kind} in {'(' if self.above_low else '['}{_number(self.low)}, "
                    f"{_number(self.high)}{')' if self.below_high else ']'}")
        if self.unit:
            text += f" {self.unit}"
        if self.allow_inf:
            text += ", or inf"
        return text + (f" ({self.why})" if self.why else "")


def _number(value: float) -> str:
    """10000000 -> '10,000,000', 0.5 -> '0.5': a bound as a learner reads it."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:g}"


@dataclass(frozen=True)
class Choice:
    """A setting that names one of a few things (a preset, a dtype)."""
    values: tuple
    optional: bool = False  # None means "not set"

    def check(self, name: str, value, error: type = ConfigError) -> None:
        if value is None and self.optional:
            return
        if value not in self.values:
            raise error(f"{name} must be one of {', '.join(self.values)}, got {value!r}")


@dataclass(frozen=True)
class ModelChoice:
    """`--model`: a preset's key, or a Hugging Face config.json (a file, or a folder holding
    one) that model_config.py can read; its refusal names the key that is wrong."""

    def check(self, name: str, value, error: type = ConfigError) -> None:
        if not isinstance(value, str) or not value:
            raise error(f"{name} must be a model preset or a config.json path, got {value!r}")
        if value in MODELS:
            return
        try:
            model_spec(value)
        except ModelConfigError as problem:
            raise error(f"{name} {problem}; or choose a preset: {', '.join(MODELS)}") from None


@dataclass(frozen=True)
class Switch:
    """An on/off setting (--enable-prefix-caching / --no-enable-prefix-caching)."""

    def check(self, name: str, value, error: type = ConfigError) -> None:
        if not isinstance(value, bool):
            raise error(f"{name} must be on or off, got {value!r}")


@dataclass(frozen=True)
class Parsed:
    """A setting its own module parses from the command line and checks whole (`parser`): here
    only that it was parsed, or left unset."""
    parser: str

    def check(self, name: str, value, error: type = ConfigError) -> None:
        if value is not None and not hasattr(value, "validate"):
            raise error(f"{name} must be given as {self.parser} makes it, got {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    # -- the model and the hardware it runs on (see presets.py) --
    model: str = "llama-3.3-70b-fp8"    # the lesson's model (or a config.json path) ...
    gpu: str = "h200"                   # ... on the card where it fits (an H100 cannot hold its KV)
    tensor_parallel_size: int = 1       # GPUs the weights and KV are split across
    enable_expert_parallel: bool = False  # MoE: whole experts spread over the GPUs (moe.py)
    data_parallel_size: int = 1         # with expert parallelism: attention ranks, each with
    #                                     its own KV and requests, experts over tp x dp GPUs;
    #                                     without: replicas of the engine (cluster.py)
    quantization: Optional[str] = None  # "fp8": quantize a 16-bit checkpoint at load; None: as
    #                                     the checkpoint ships (its quantization_config)
    dtype: str = "auto"                 # 16-bit type of unquantized weights; auto: torch_dtype
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
    vllm_version: str = DEFAULT_VERSION  # whose CPU work per step the clock adds
    #                                     (engine_overhead.py): "0.6" (V0), "0.18.0", "0.30.0"
    async_scheduling: bool = True       # step n+1 scheduled before step n's output is known
    #                                     (async_scheduling.py; the continuous modes only), and
    #                                     the CPU's work for it overlapping step n on the GPU
    #                                     (engine_overhead.py); vLLM 0.30.0's default
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
        for field_name, rule in FIELD_RULES.items():
            rule.check(name(field_name), getattr(self, field_name))
        _check_tensor_parallel_size(self, name)
        _check_model_len(self, name)
        _check_quantization(self, name)
        _check_expert_parallel(self, name)
        _check_long_prefill_threshold(self, name)
        _check_linear_clock_moves(self, name)
        _check_async_scheduling_exists(self, name)
        if self.speculative_config is not None:  # its own keys, the target's model and TP
            self.speculative_config.validate(self.model, self.tensor_parallel_size)

    def validate_scheduler(self, enable_chunked_prefill: bool,
                           name: Callable[[str], str] = flag_name) -> None:
        """vLLM's refusals of the token budget one continuous mode runs with, which
        `SchedulerConfig.verify_max_model_len` makes at start-up (vllm/config/scheduler.py,
        0.30.0 and 0.18.0 alike):

        - without chunked prefill every prompt runs whole, so the budget must hold the longest
          (otherwise a long prompt could never be scheduled);
        - the budget must give each of `max_num_seqs` requests at least one token a step.
        """
        budget = self.token_budget(enable_chunked_prefill)
        budget_name = self._budget_name(enable_chunked_prefill, name)
        if not enable_chunked_prefill and budget < self.max_model_len:
            raise ConfigError(
                f"{budget_name} {budget} is below --max-model-len {self.max_model_len}: with "
                "chunked prefill off a whole prompt must fit in one step (vLLM refuses this too); "
                "raise the budget, lower --max-model-len, or leave out mode continuous")
        if budget < self.max_num_seqs:
            raise ConfigError(
                f"{budget_name} {budget} is below {name('max_num_seqs')} {self.max_num_seqs}: "
                "a step's budget must hold a token for every running request (vLLM refuses "
                f"this too); raise the budget to {self.max_num_seqs} or lower "
                f"{name('max_num_seqs')}")

    def _budget_name(self, enable_chunked_prefill: bool, name: Callable[[str], str]) -> str:
        if self.max_num_batched_tokens is not None:
            return name("max_num_batched_tokens")
        if enable_chunked_prefill:
            return name("default_chunked_budget")
        return "the unchunked budget max(--max-model-len, 2048)"


_MS = dict(unit="ms")
_TOKENS = dict(integer=True, unit="tokens")
FIELD_RULES = {  # EngineConfig field -> the values it may take (see the module docstring)
    "model": ModelChoice(),
    "gpu": Choice(tuple(GPUS)),
    "tensor_parallel_size": Range(1, MAX_NUM_SEQS, integer=True),  # and the heads rule below
    "enable_expert_parallel": Switch(),
    "data_parallel_size": Range(1, 64, integer=True, why="8 nodes of 8 GPUs"),
    "quantization": Choice(QUANTIZATIONS, optional=True),
    "dtype": Choice(tuple(DTYPES)),
    "gpu_memory_utilization": Range(0, 1, above_low=True),  # vllm/config/cache.py: gt=0, le=1
    "kv_cache_dtype": Choice(("auto", "fp8")),
    "block_size": Range(CUDA_BLOCK_SIZE_MULTIPLE, MAX_TOKENS, multiple_of=CUDA_BLOCK_SIZE_MULTIPLE,
                        also=SMALL_BLOCK_SIZES, **_TOKENS),  # see SMALL_BLOCK_SIZES
    "num_gpu_blocks_override": Range(1, MAX_NUM_GPU_BLOCKS, integer=True, optional=True,
                                     why="servesim keeps every block in memory"),
    "max_model_len": Range(1, MAX_TOKENS, **_TOKENS),
    "max_num_seqs": Range(1, MAX_NUM_SEQS, integer=True),
    "max_num_batched_tokens": Range(1, MAX_TOKENS, optional=True, **_TOKENS),
    "default_chunked_budget": Range(1, MAX_TOKENS, **_TOKENS),
    "enable_prefix_caching": Switch(),
    "long_prefill_token_threshold": Range(0, MAX_TOKENS, why="0 turns the cap off", **_TOKENS),
    "speculative_config": Parsed("parse_speculative_config (commands/speculative_flag.py)"),
    "batching_window_ms": Range(0, MAX_MS, **_MS),
    "forward_model": Choice(("roofline", "linear")),
    "vllm_version": Choice(tuple(VERSIONS)),
    "async_scheduling": Switch(),
    "linear_step_ms": Range(0, MAX_MS, **_MS),
    "linear_prefill_token_ms": Range(0, MAX_MS, **_MS),
    "linear_decode_token_ms": Range(0, MAX_MS, **_MS),
}


# -- vLLM's start-up refusals that tie settings together ----------------------------------------

def valid_tensor_parallel_sizes(model_key: str) -> list[int]:
    """The tensor-parallel degrees vLLM accepts for a model: they split the attention heads
    evenly (`ModelConfig.verify_with_parallel_config`, vllm/config/model.py), and either split
    the KV heads evenly or are a multiple of their number, each GPU then holding a copy of one
    KV head (`LlamaAttention.__init__`, vllm/model_executor/models/llama.py; 0.18.0 alike)."""
    model = model_spec(model_key)
    return [tp for tp in range(1, model.num_heads + 1)
            if model.num_heads % tp == 0
            and (model.num_kv_heads % tp == 0 if tp <= model.num_kv_heads
                 else tp % model.num_kv_heads == 0)]


def _check_tensor_parallel_size(config: EngineConfig, name: Callable[[str], str]) -> None:
    valid = valid_tensor_parallel_sizes(config.model)
    if config.tensor_parallel_size not in valid:
        model = model_spec(config.model)
        raise ConfigError(
            f"{name('tensor_parallel_size')} {config.tensor_parallel_size} does not split "
            f"{model.name}'s {model.num_heads} attention heads and {model.num_kv_heads} KV heads "
            f"evenly (vLLM refuses it); choose from {', '.join(map(str, valid))}")


def _check_model_len(config: EngineConfig, name: Callable[[str], str]) -> None:
    """vLLM refuses a --max-model-len above the model's max_position_embeddings
    (`_get_and_verify_max_len`, vllm/config/model.py; VLLM_ALLOW_LONG_MAX_MODEL_LEN overrides it,
    servesim has no such override)."""
    longest = model_spec(config.model).max_position_embeddings
    if longest is not None and config.max_model_len > longest:
        raise ConfigError(
            f"{name('max_model_len')} {config.max_model_len} is above {config.model}'s "
            f"max_position_embeddings {longest} (vLLM refuses this); give at most {longest}")


def _check_quantization(config: EngineConfig, name: Callable[[str], str]) -> None:
    """A checkpoint that ships quantized runs with its own method: vLLM refuses another
    (`ModelConfig._verify_quantization`, vllm/config/model.py). Online quantization is FP8 only."""
    shipped = checkpoint_quantization(model_spec(config.model))
    wanted = config.quantization
    if wanted is None:
        return
    if shipped is not None and wanted != shipped:
        raise ConfigError(f"{name('quantization')} {wanted}: {config.model} ships quantized with "
                          f"{shipped} (vLLM refuses another method); give {shipped} or leave it out")
    if shipped is None and wanted != "fp8":
        raise ConfigError(f"{name('quantization')} {wanted}: a 16-bit checkpoint is quantized at "
                          "load time to fp8 only (mxfp4 needs a checkpoint shipped in it)")


def _check_expert_parallel(config: EngineConfig, name: Callable[[str], str]) -> None:
    """Expert parallelism needs experts. (Without it, --data-parallel-size N is N replicas of
    the engine behind a router: cluster.py.)"""
    if config.enable_expert_parallel and model_spec(config.model).moe is None:
        raise ConfigError(f"{name('enable_expert_parallel')}: {config.model} has no experts "
                          "(a dense model); leave the flag out")


def _check_long_prefill_threshold(config: EngineConfig, name: Callable[[str], str]) -> None:
    """`SchedulerConfig.verify_max_model_len` (vllm/config/scheduler.py, 0.30.0). vLLM 0.18.0
    made this check only with --max-num-partial-prefills above 1, which servesim does not have.
    With speculative decoding, a threshold below 1 + k is refused too: vLLM 0.30.0 starts with
    it, but the first admission it pads to 1 + k (scheduler.py) trips `assert num_new_tokens ==
    1 + self.num_spec_tokens`; which workloads admit no such request is luck, so servesim
    refuses the combination outright."""
    if config.long_prefill_token_threshold > config.max_model_len:
        raise ConfigError(
            f"{name('long_prefill_token_threshold')} {config.long_prefill_token_threshold} is "
            f"above {name('max_model_len')} {config.max_model_len} (vLLM refuses this); give at "
            f"most {config.max_model_len}, or 0 to turn the cap off")
    speculative = config.speculative_config
    if speculative is not None and 0 < config.long_prefill_token_threshold <= (
            speculative.num_speculative_tokens):
        padded = 1 + speculative.num_speculative_tokens
        raise ConfigError(
            f"{name('long_prefill_token_threshold')} {config.long_prefill_token_threshold} is "
            f"below 1 + k = {padded} with --speculative-config: vLLM 0.30.0 pads a request "
            f"admitted with one token to compute to {padded} tokens, then cuts it to the "
            f"threshold and fails its own assertion (it cannot run this); give 0 or at least "
            f"{padded}")


def _check_async_scheduling_exists(config: EngineConfig, name: Callable[[str], str]) -> None:
    """vLLM V0 has no async scheduler (it came with V1, vLLM PR #19970)."""
    version = VERSIONS[config.vllm_version]
    if config.async_scheduling and not version.has_async_scheduling:
        raise ConfigError(
            f"{name('async_scheduling')} is on, but vLLM {version.version} ({version.generation}) "
            f"has no async scheduling; turn it off (--no-async-scheduling) or choose "
            f"{name('vllm_version')} from "
            f"{', '.join(v for v, e in VERSIONS.items() if e.has_async_scheduling)}")


def _check_linear_clock_moves(config: EngineConfig, name: Callable[[str], str]) -> None:
    """The linear clock's shortest step, one token, must take time: else the virtual clock
    stands still while requests run, and every latency and throughput is 0 or meaningless."""
    if config.forward_model != "linear":
        return
    per_token_ms = min(config.linear_prefill_token_ms, config.linear_decode_token_ms)
    if config.linear_step_ms + per_token_ms < MIN_LINEAR_STEP_MS:
        cheapest = ("linear_prefill_token_ms"
                    if config.linear_prefill_token_ms <= config.linear_decode_token_ms
                    else "linear_decode_token_ms")
        raise ConfigError(
            f"{name('linear_step_ms')} {config.linear_step_ms:g} with {name(cheapest)} "
            f"{getattr(config, cheapest):g}: a step of one token would take no time, so the "
            f"clock would stand still; give a step at least {MIN_LINEAR_STEP_MS:g} ms "
            f"(e.g. {name('linear_step_ms')} 0.2)")


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

    def check(self, mode_names: tuple) -> None:
        """Every knob by type and range, once, before any command reads one (commands/cli.py):
        a string, None, a complex number, a bool where a count belongs, a mode not among
        `mode_names`, or a value out of range is one line naming the knob, whatever the
        command."""
        modes = self.compared_modes
        if (not isinstance(modes, (list, tuple)) or not modes
                or not all(isinstance(mode, str) for mode in modes)):
            raise ConfigError(f"COMPARED_MODES in code/main.py must be a list of mode names, "
                              f"e.g. [\"naive\", \"chunked\"], got {modes!r}")
        unknown = [mode for mode in modes if mode.strip().lower() not in (*mode_names, "all")]
        if unknown:
            raise ConfigError(f"unknown COMPARED_MODES in code/main.py {','.join(unknown)!r}; "
                              f"choose from {', '.join(mode_names)} or all")
        for field_name, value in self.engine_defaults().items():
            FIELD_RULES[field_name].check(Knobs.name(field_name), value)

    @staticmethod
    def name(field_name: str) -> str:
        """How a refusal names a knob-set field: `BLOCK_SIZE in code/main.py`."""
        return f"{Knobs.FIELD_KNOBS[field_name]} in code/main.py"
