"""`--speculative-config JSON`: the command line's text made a `SpeculativeConfig`, checked as
vLLM checks the JSON on its own (vllm/config/speculative.py, 0.30.0), with the method inferred
from `model` as vLLM infers it. What needs the target model waits for
`SpeculativeConfig.validate` (spec_decode.py), which runs with the other engine checks.
"""

import json
from typing import Optional

from commands.user_input import JsonRefused, parse_json
from config import ConfigError
from spec_decode import (EAGLE_METHODS, MODELLED_METHODS, NO_GPU_WORK_METHODS, UNMODELLED_METHODS,
                         SpeculativeConfig)

EXAMPLE = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
           '"num_speculative_tokens": 3}')
# vLLM sets no upper bound on k; servesim keeps per-position counters for every draft position,
# so it sets one far past any published setup (vLLM's own tests and benchmarks use k = 1 to 8).
MAX_SPECULATIVE_TOKENS = 64
# The JSON keys servesim reads, with vLLM's names and meanings.
KEYS = ("method", "num_speculative_tokens", "model", "prompt_lookup_min", "prompt_lookup_max",
        "draft_tensor_parallel_size", "rejection_sample_method", "synthetic_acceptance_rates",
        "synthetic_acceptance_length")
# vLLM's n-gram window when neither bound is given ("arbitrarily chosen", config/speculative.py).
DEFAULT_PROMPT_LOOKUP = 5


def parse_speculative_config(text: str) -> SpeculativeConfig:
    """`--speculative-config JSON` checked as vLLM checks it on its own (what needs the target
    waits for SpeculativeConfig.validate); the method inferred from `model` as vLLM infers it."""
    try:
        values = parse_json(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--speculative-config is not JSON ({error.msg}, character "
                          f"{error.pos}); write it like '{EXAMPLE}'") from None
    except JsonRefused as error:
        raise ConfigError(f"--speculative-config: {error}; write it like '{EXAMPLE}'") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--speculative-config must be a JSON object, like '{EXAMPLE}'")
    if "tensor_parallel_size" in values:
        raise ConfigError("--speculative-config: 'tensor_parallel_size' is not a key of it "
                          "(vLLM refuses it too); write 'draft_tensor_parallel_size'")
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise ConfigError(f"--speculative-config: servesim does not model "
                          f"{', '.join(map(repr, unknown))}; it reads {', '.join(KEYS)}")
    model = _text(values, "model")
    method = infer_method(_text(values, "method"), model)
    num_speculative_tokens = _positive_int(values, "num_speculative_tokens")
    if num_speculative_tokens is None:
        raise ConfigError(f"--speculative-config needs num_speculative_tokens (k >= 1), "
                          f"like '{EXAMPLE}'")
    if num_speculative_tokens > MAX_SPECULATIVE_TOKENS:
        raise ConfigError(f"--speculative-config num_speculative_tokens must be at most "
                          f"{MAX_SPECULATIVE_TOKENS} (servesim's bound; published setups use "
                          f"1 to 8), got {num_speculative_tokens}")
    if model is None and method in ("draft_model", *EAGLE_METHODS):
        raise ConfigError(f"--speculative-config method {method} needs a model (vLLM: "
                          f"num_speculative_tokens was provided but without speculative model)")
    lookup_min, lookup_max = _prompt_lookup(values, method)
    return SpeculativeConfig(
        method=method, num_speculative_tokens=num_speculative_tokens, model=model,
        prompt_lookup_min=lookup_min, prompt_lookup_max=lookup_max,
        draft_tensor_parallel_size=_positive_int(values, "draft_tensor_parallel_size"),
        **_synthetic_acceptance(values, num_speculative_tokens))


def infer_method(method: Optional[str], model: Optional[str]) -> str:
    """vLLM's rules: model "ngram" means n-gram; a model named like an EAGLE head ("eagle-",
    "eagle3") means that head; any other model is a draft model."""
    if method in ("ngram", "[ngram]"):
        return "ngram"
    if method is not None:
        if method not in MODELLED_METHODS and method not in UNMODELLED_METHODS:
            raise ConfigError(f"--speculative-config method {method!r} is not one of vLLM's; "
                              f"servesim runs {', '.join(MODELLED_METHODS)}")
        return method
    if model in ("ngram", "[ngram]"):
        return "ngram"
    if model is not None and "eagle-" in model.lower():
        return "eagle"
    if model is not None and "eagle3" in model.lower():
        return "eagle3"
    return "draft_model"


def _prompt_lookup(values: dict, method: str) -> tuple:
    """n-gram's window: vLLM's default 5/5; one bound given, the other copies it."""
    lookup_min = _positive_int(values, "prompt_lookup_min")
    lookup_max = _positive_int(values, "prompt_lookup_max")
    if method not in NO_GPU_WORK_METHODS:
        if lookup_min is not None or lookup_max is not None:
            raise ConfigError(f"--speculative-config prompt_lookup_min/max apply to ngram and "
                              f"ngram_gpu, not to method {method}")
        return None, None
    if lookup_min is None and lookup_max is None:
        return DEFAULT_PROMPT_LOOKUP, DEFAULT_PROMPT_LOOKUP
    lookup_min = lookup_min or lookup_max
    lookup_max = lookup_max or lookup_min
    if lookup_min > lookup_max:
        raise ConfigError(f"--speculative-config prompt_lookup_min={lookup_min} must be <= "
                          f"prompt_lookup_max={lookup_max}")
    return lookup_min, lookup_max


def _synthetic_acceptance(values: dict, num_drafts: int) -> dict:
    """vLLM 0.30.0's synthetic rejection sampling: accept drafts at given rates, whatever the
    tokens. Exactly one of per-position rates (k of them, never growing) or a mean length."""
    method = _text(values, "rejection_sample_method") or "standard"
    rates = values.get("synthetic_acceptance_rates")
    length = values.get("synthetic_acceptance_length")
    if method not in ("standard", "synthetic"):
        raise ConfigError(f"--speculative-config rejection_sample_method {method!r}: servesim "
                          "models standard (the model's own acceptance) and synthetic")
    if method == "standard":
        if rates is not None or length is not None:
            raise ConfigError("--speculative-config synthetic_acceptance_rates/length need "
                              '"rejection_sample_method": "synthetic"')
        return {}
    if (rates is None) == (length is None):
        raise ConfigError("--speculative-config: rejection_sample_method synthetic needs exactly "
                          "one of synthetic_acceptance_rates and synthetic_acceptance_length")
    if rates is not None:
        return {"rejection_sample_method": method,
                "synthetic_acceptance_rates": _per_position_rates(rates, num_drafts)}
    if not _is_number(length) or not 1.0 <= length <= num_drafts + 1:
        raise ConfigError(f"--speculative-config synthetic_acceptance_length must be a number in "
                          f"[1, {num_drafts + 1}] (1 + num_speculative_tokens), got {length!r}")
    return {"rejection_sample_method": method, "synthetic_acceptance_length": float(length)}


def _per_position_rates(rates, num_drafts: int) -> tuple:
    if (not isinstance(rates, list) or len(rates) != num_drafts
            or not all(_is_number(r) and 0.0 <= r <= 1.0 for r in rates)
            or any(later > earlier for earlier, later in zip(rates, rates[1:]))):
        raise ConfigError(f"--speculative-config synthetic_acceptance_rates must be a list of "
                          f"{num_drafts} numbers in [0, 1] that never grow (position i: the "
                          f"first i + 1 drafts all accepted), got {rates!r}")
    return tuple(float(r) for r in rates)


def _text(values: dict, key: str) -> Optional[str]:
    value = values.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"--speculative-config {key} must be a string, got {value!r}")
    return value


def _positive_int(values: dict, key: str) -> Optional[int]:
    value = values.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"--speculative-config {key} must be a positive integer, got {value!r}")
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
