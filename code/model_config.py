"""A Hugging Face `config.json`, read as servesim's shapes: the model a learner actually serves.

`--model` takes a preset name or a path to a checkpoint's `config.json` (the file, or a folder
holding it). The file is read with `json` alone: no network, no `transformers`. What servesim
needs from it is the arithmetic of the roofline and of the memory plan: layers, widths, heads,
the experts (moe.py), MLA's ranks (mla.py), sliding windows, MTP layers, the weight precision
and the longest context. Each architecture names these differently; the readers below map its
keys onto servesim's, one function per family:

    LlamaForCausalLM, MistralForCausalLM, Qwen2/Qwen3ForCausalLM   dense (Qwen2: q/k/v biases)
    MixtralForCausalLM                                            E experts, top-k, no shared
    Qwen2MoeForCausalLM, Qwen3MoeForCausalLM                       + shared expert (Qwen2-MoE),
                                                                    mlp_only_layers dense
    DeepseekV2ForCausalLM, DeepseekV3ForCausalLM                   MLA, shared experts, the
                                                                    first_k_dense_replace layers
                                                                    dense, MTP layers
    GptOssForCausalLM                                              sliding-window layers, MXFP4
                                                                    experts
    Llama4ForConditionalGeneration (its text_config)              a shared expert, MoE every
                                                                    interleave_moe_layer_step

The weight precision: `quantization_config.quant_method` (fp8, mxfp4) if the checkpoint ships
quantized, else `torch_dtype` (bfloat16, float16); vLLM's `--quantization` and `--dtype`
override it (forward to `presets.with_precision`). A key missing, of the wrong type or
nonsensical (a layer count of 0, more experts per token than experts) is one line naming it.

Left out, as the roofline does not need them: rotary scaling, norms' epsilon, activation
functions, Llama-4's chunked local attention (its layers are priced as full attention, which
overstates Scout's KV per token for contexts past 8,192), gpt-oss's attention sinks and expert
biases (0.04% of its weights), vision towers.
"""

import json
import os
from typing import Optional

from mla import MlaSpec
from moe import MoeSpec


# The largest count a config may give: Hugging Face's configs hold 32-bit integers, and far
# larger figures would overflow the clock's floating-point arithmetic.
MAX_COUNT = 2**31 - 1


class ModelConfigError(ValueError):
    """A config.json servesim cannot read; the message is one line naming the key."""


# torch_dtype -> servesim's weight dtype; quant_method -> the same.
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
QUANT_METHODS = {"fp8": "fp8", "mxfp4": "mxfp4"}


def config_json_path(path: str) -> str:
    """The file itself, or `config.json` inside a folder."""
    if os.path.isdir(path):
        return os.path.join(path, "config.json")
    return path


def read_config_json(path: str) -> dict:
    """The file's JSON object, or one line saying why it cannot be read."""
    file_path = config_json_path(path)
    if not os.path.isfile(file_path):
        problem = "not a regular file" if os.path.exists(file_path) else "no such file"
        raise ModelConfigError(f"{file_path}: {problem} (give a model preset, a config.json, "
                               "or a folder holding one)")
    try:
        with open(file_path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelConfigError(f"{file_path}: not a readable JSON file ({error})") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{file_path}: a config.json holds a JSON object")
    return data


def model_fields(data: dict, source: str) -> dict:
    """`ModelSpec` fields of the checkpoint `data` describes (`source`: where it came from)."""
    architectures = data.get("architectures")
    if not (isinstance(architectures, list) and architectures
            and isinstance(architectures[0], str)):
        raise ModelConfigError(f"{source}: key architectures missing (a list naming the model "
                               "class, e.g. [\"LlamaForCausalLM\"])")
    architecture = architectures[0]
    if architecture not in READERS:
        raise ModelConfigError(f"{source}: architectures {architecture!r} is not one servesim "
                               f"reads; it reads {', '.join(READERS)}")
    reader = Keys(data, source)
    if architecture == "Llama4ForConditionalGeneration":  # the text model inside
        reader = Keys(reader.table("text_config"), source + " text_config", outer=data)
    fields = _common(reader)
    fields["weight_dtype"] = _weight_dtype(reader)
    fields.update(READERS[architecture](reader, fields))  # may say the experts' dtype apart
    fields["name"] = _name(data, source)
    fields["source"] = f"config.json of {fields['name']} ({architecture})"
    return fields


class Keys:
    """Typed access to a config's keys: each read names the key when it is missing or wrong."""

    def __init__(self, data: dict, source: str, outer: Optional[dict] = None):
        self.data = data
        self.source = source
        self.outer = outer or {}  # Llama-4: the top-level file, for torch_dtype and friends

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def count(self, key: str, default: Optional[int] = None, low: int = 1) -> int:
        """A positive integer (at least `low`), or `default` when absent."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ModelConfigError(f"{self.source}: key {key} missing (a positive integer)")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
            raise ModelConfigError(f"{self.source}: key {key} must be an integer in [{low}, "
                                   f"{MAX_COUNT:,}], got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise ModelConfigError(f"{self.source}: key {key} must be true or false, got {value!r}")
        return value

    def table(self, key: str) -> dict:
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise ModelConfigError(f"{self.source}: key {key} missing (a JSON object)")
        return value

    def text(self, key: str) -> Optional[str]:
        value = self.data.get(key, self.outer.get(key))
        if value is not None and not isinstance(value, str):
            raise ModelConfigError(f"{self.source}: key {key} must be a string, got {value!r}")
        return value


def _common(keys: Keys) -> dict:
    """What every decoder-only transformer's config says the same way."""
    hidden = keys.count("hidden_size")
    heads = keys.count("num_attention_heads")
    kv_heads = keys.count("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise ModelConfigError(f"{keys.source}: key num_key_value_heads {kv_heads} must divide "
                               f"num_attention_heads {heads}")
    fields = dict(num_layers=keys.count("num_hidden_layers"), hidden_size=hidden,
                  num_heads=heads, num_kv_heads=kv_heads,
                  head_dim=keys.count("head_dim", default=hidden // heads),
                  vocab_size=keys.count("vocab_size"),
                  tied_embeddings=keys.flag("tie_word_embeddings", False),
                  attention_bias=keys.flag("attention_bias", False),
                  max_position_embeddings=keys.count("max_position_embeddings"))
    return fields


def _weight_dtype(keys: Keys) -> str:
    """The checkpoint's precision: its quantization method, else its torch_dtype."""
    quantization = keys.data.get("quantization_config", keys.outer.get("quantization_config"))
    if quantization is not None:
        method = quantization.get("quant_method") if isinstance(quantization, dict) else None
        if method not in QUANT_METHODS:
            raise ModelConfigError(f"{keys.source}: key quantization_config.quant_method "
                                   f"{method!r} is not one servesim prices; it prices "
                                   f"{', '.join(QUANT_METHODS)}")
        return QUANT_METHODS[method]
    torch_dtype = keys.text("torch_dtype") or "bfloat16"  # gpt-oss leaves it out: BF16
    if torch_dtype not in TORCH_DTYPES:
        raise ModelConfigError(f"{keys.source}: key torch_dtype {torch_dtype!r} is not one "
                               f"servesim prices; it prices {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[torch_dtype]


def _name(data: dict, source: str) -> str:
    """`_name_or_path` if the file says it, else the folder's name (or the file's)."""
    name = data.get("_name_or_path")
    if isinstance(name, str) and name:
        return name
    path = source.rstrip("/")
    if os.path.basename(path) == "config.json":
        path = os.path.dirname(path) or path
    return os.path.splitext(os.path.basename(path))[0]


# -- one reader per family: the keys beyond the common ones ---------------------------------------

def _dense(keys: Keys, fields: dict) -> dict:
    return dict(intermediate_size=keys.count("intermediate_size"))


def _qwen2(keys: Keys, fields: dict) -> dict:
    """Qwen2 (and Qwen2.5) carry q/k/v biases without saying so in the config."""
    return dict(_dense(keys, fields), attention_bias=True)


def _experts(keys: Keys, num_experts_key: str, num_moe_layers: int,
             intermediate_key: str, shared: int = 0, expert_dtype: str = "") -> MoeSpec:
    num_experts = keys.count(num_experts_key)
    per_token = keys.count("num_experts_per_tok")
    if per_token > num_experts:
        raise ModelConfigError(f"{keys.source}: key num_experts_per_tok {per_token} is more "
                               f"than {num_experts_key} {num_experts}")
    return MoeSpec(num_experts=num_experts, experts_per_token=per_token,
                   expert_intermediate_size=keys.count(intermediate_key),
                   num_moe_layers=num_moe_layers, shared_intermediate_size=shared,
                   expert_dtype=expert_dtype)


def _mixtral(keys: Keys, fields: dict) -> dict:
    """Every layer's MLP is experts of width intermediate_size."""
    moe = _experts(keys, "num_local_experts", fields["num_layers"], "intermediate_size")
    return dict(intermediate_size=moe.expert_intermediate_size, moe=moe)


def _qwen_moe(keys: Keys, fields: dict) -> dict:
    """Experts every decoder_sparse_step layers except mlp_only_layers; Qwen2-MoE adds a shared
    expert (shared_expert_intermediate_size), Qwen3-MoE has none."""
    num_layers = fields["num_layers"]
    step = keys.count("decoder_sparse_step", default=1)
    dense_layers = keys.data.get("mlp_only_layers") or []
    if not isinstance(dense_layers, list):
        raise ModelConfigError(f"{keys.source}: key mlp_only_layers must be a list of layers")
    moe_layers = [i for i in range(num_layers) if i not in dense_layers and (i + 1) % step == 0]
    shared = keys.count("shared_expert_intermediate_size", default=0, low=0)
    moe = _experts(keys, "num_experts", len(moe_layers), "moe_intermediate_size", shared)
    return dict(intermediate_size=keys.count("intermediate_size"), moe=moe,
                attention_bias=fields["attention_bias"] or keys.data["architectures"][0]
                == "Qwen2MoeForCausalLM")


def _deepseek(keys: Keys, fields: dict) -> dict:
    """MLA attention; the first first_k_dense_replace layers dense (intermediate_size), then
    experts every moe_layer_freq layers, each with n_shared_experts shared experts."""
    num_layers = fields["num_layers"]
    first_dense = keys.count("first_k_dense_replace", default=0, low=0)
    freq = keys.count("moe_layer_freq", default=1)
    if first_dense > num_layers:
        raise ModelConfigError(f"{keys.source}: key first_k_dense_replace {first_dense} is more "
                               f"than num_hidden_layers {num_layers}")
    moe_layers = [i for i in range(first_dense, num_layers) if i % freq == 0]
    expert_width = keys.count("moe_intermediate_size")
    shared = keys.count("n_shared_experts", default=0, low=0) * expert_width
    moe = _experts(keys, "n_routed_experts", len(moe_layers), "moe_intermediate_size", shared)
    mla = MlaSpec(kv_lora_rank=keys.count("kv_lora_rank"),
                  qk_rope_head_dim=keys.count("qk_rope_head_dim"),
                  qk_nope_head_dim=keys.count("qk_nope_head_dim"),
                  v_head_dim=keys.count("v_head_dim"),
                  q_lora_rank=keys.count("q_lora_rank", default=0, low=0))
    return dict(intermediate_size=keys.count("intermediate_size"), moe=moe, mla=mla,
                head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                num_nextn_predict_layers=keys.count("num_nextn_predict_layers", default=0, low=0))


def _gpt_oss(keys: Keys, fields: dict) -> dict:
    """Experts in every layer, shipped in MXFP4 (attention, router, embeddings in BF16); the
    layers that layer_types calls sliding_attention attend to the last sliding_window tokens."""
    layer_types = keys.data.get("layer_types")
    if not (isinstance(layer_types, list) and len(layer_types) == fields["num_layers"]
            and set(layer_types) <= {"sliding_attention", "full_attention"}):
        raise ModelConfigError(f"{keys.source}: key layer_types must list sliding_attention or "
                               "full_attention for each of num_hidden_layers")
    quantized = fields["weight_dtype"] == "mxfp4"  # its modules_to_not_convert: all but experts
    moe = _experts(keys, "num_local_experts", fields["num_layers"], "intermediate_size",
                   expert_dtype="mxfp4" if quantized else "")
    return dict(intermediate_size=moe.expert_intermediate_size, moe=moe,
                weight_dtype="bf16" if quantized else fields["weight_dtype"],
                sliding_window=keys.count("sliding_window"),
                num_sliding_layers=layer_types.count("sliding_attention"))


def _llama4(keys: Keys, fields: dict) -> dict:
    """Experts (with one shared expert of the same width) every interleave_moe_layer_step
    layers; the other layers dense, of width intermediate_size_mlp."""
    num_layers = fields["num_layers"]
    step = keys.count("interleave_moe_layer_step", default=1)
    num_moe_layers = len([i for i in range(num_layers) if (i + 1) % step == 0])
    expert_width = keys.count("intermediate_size")
    moe = _experts(keys, "num_local_experts", num_moe_layers, "intermediate_size",
                   shared=expert_width)
    return dict(intermediate_size=keys.count("intermediate_size_mlp"), moe=moe)


READERS = {
    "LlamaForCausalLM": _dense, "MistralForCausalLM": _dense, "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _dense, "MixtralForCausalLM": _mixtral,
    "Qwen2MoeForCausalLM": _qwen_moe, "Qwen3MoeForCausalLM": _qwen_moe,
    "DeepseekV2ForCausalLM": _deepseek, "DeepseekV3ForCausalLM": _deepseek,
    "GptOssForCausalLM": _gpt_oss, "Llama4ForConditionalGeneration": _llama4,
    "Llama4ForCausalLM": _llama4,
}
