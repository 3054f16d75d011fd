"""The numbers to remember: GPUs and models as data, each figure with where it comes from.

Only facts live here; what follows from them (parameter counts, weight bytes, KV bytes per
token, KV capacity, step time) is derived in `gpu_memory.py` and `forward_model.py`, so a learner
can check every derived figure against `python3 code/main.py presets`.

Compute peaks are *dense* tensor-core figures. NVIDIA's datasheets print FP8/BF16 "with
sparsity", which is 2x the dense figure; LLM inference does not use 2:4 sparsity.
"""

import functools
import os
from dataclasses import dataclass, replace
from typing import Optional

from mla import MlaSpec
from model_config import config_json_path, model_fields, read_config_json
from moe import MoeSpec

# Bytes per element of each dtype name used below and by --kv-cache-dtype.
# MXFP4 (gpt-oss's experts): 4-bit values with one 8-bit scale per 32, 4.25 bits each (OCP
# Microscaling Formats (MX) v1.0 specification).
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "mxfp4": 4.25 / 8}


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gib: float            # total as torch.cuda reports it (the driver keeps a little)
    memory_bandwidth_gbs: float  # HBM/GDDR bandwidth, GB/s (10^9 bytes per second)
    bf16_tflops: float           # dense BF16 tensor-core peak, 10^12 FLOP/s
    fp8_tflops: Optional[float]  # dense FP8 peak; None: no FP8 tensor cores (FP8 weights are
    #                              upcast and multiplied at the BF16 rate, as vLLM's Marlin does)
    interconnect_gbs: float      # GPU-to-GPU bandwidth per direction, GB/s (tensor parallelism)
    source: str                  # where the figures come from (`presets` prints it)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int            # < num_heads: grouped-query attention, a smaller KV cache
    head_dim: int
    intermediate_size: int       # FFN width (of the dense layers, in an MoE model)
    vocab_size: int
    weight_dtype: str            # "bf16", "fp16" or "fp8" (linear layers; embeddings stay 16-bit)
    source: str                  # the config.json the shapes come from (`presets` prints it)
    num_mlp_matrices: int = 3    # 3: gated SwiGLU (gate, up, down); 2: plain fc1 -> fc2 (OPT)
    tied_embeddings: bool = False  # LM head shares the embedding matrix
    num_position_embeddings: int = 0  # learned absolute positions (OPT); 0 for rotary models
    attention_bias: bool = False   # q/k/v projections carry biases (Qwen2, OPT)
    # -- read from a config.json (model_config.py); the hand-written presets leave them unset --
    max_position_embeddings: Optional[int] = None  # the longest context; the default
    #                              --max-model-len, and its ceiling (vLLM's rule)
    moe: Optional[MoeSpec] = None  # experts (moe.py); None: every layer a dense MLP
    mla: Optional[MlaSpec] = None  # latent attention (mla.py); None: GQA heads
    sliding_window: int = 0      # tokens a sliding-window layer attends to (gpt-oss: 128)
    num_sliding_layers: int = 0  # layers with that window; the rest attend to everything
    num_nextn_predict_layers: int = 0  # MTP layers shipped for speculative decoding (DeepSeek)

    # -- parameters: attention, dense MLPs, experts --------------------------------------------

    @property
    def num_attention_params(self) -> int:
        """The q, k, v, o projections (or MLA's), all layers."""
        if self.mla is not None:
            return self.num_layers * self.mla.attention_params_per_layer(self.hidden_size,
                                                                         self.num_heads)
        q_and_o = 2 * self.hidden_size * self.num_heads * self.head_dim
        k_and_v = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        return self.num_layers * (q_and_o + k_and_v)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - (self.moe.num_moe_layers if self.moe else 0)

    @property
    def num_dense_mlp_params(self) -> int:
        """The MLPs of the dense layers (all of them in a dense model)."""
        return (self.num_dense_layers * self.num_mlp_matrices * self.hidden_size
                * self.intermediate_size)

    @property
    def num_expert_params(self) -> int:
        """Every routed expert of every MoE layer (0 for a dense model)."""
        if self.moe is None:
            return 0
        return self.moe.num_moe_layers * self.moe.num_experts * self.moe.expert_params(
            self.hidden_size)

    @property
    def num_shared_expert_params(self) -> int:
        """Shared experts of every MoE layer: read and computed by every token."""
        if self.moe is None:
            return 0
        return self.moe.num_moe_layers * self.moe.shared_params(self.hidden_size)

    @property
    def num_always_read_params(self) -> int:
        """The linear weights every step reads whatever its tokens: all but the routed experts."""
        return self.num_attention_params + self.num_dense_mlp_params + self.num_shared_expert_params

    @property
    def num_linear_params(self) -> int:
        """Weights of the per-layer matmuls (attention, MLPs, every expert), all layers."""
        return self.num_always_read_params + self.num_expert_params

    @property
    def num_active_linear_params(self) -> int:
        """The linear weights one token computes on: all but the experts it did not pick."""
        if self.moe is None:
            return self.num_linear_params
        picked = self.moe.num_moe_layers * self.moe.experts_per_token * self.moe.expert_params(
            self.hidden_size)
        return self.num_always_read_params + picked

    @property
    def num_embedding_params(self) -> int:
        """Token embeddings, plus the LM head when it is a matrix of its own."""
        matrices = 1 if self.tied_embeddings else 2
        return matrices * self.vocab_size * self.hidden_size

    @property
    def num_small_params(self) -> int:
        """Norm weights, q/k/v biases, learned positions and routers: 16-bit whatever the weight
        dtype."""
        norms = (2 * self.num_layers + 1) * self.hidden_size
        if self.mla is not None:
            norms += self.num_layers * self.mla.norm_params_per_layer()
        biases = 0
        if self.attention_bias:
            biases = self.num_layers * (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        routers = self.moe.num_moe_layers * self.moe.router_params(self.hidden_size) if self.moe else 0
        return norms + biases + routers + self.num_position_embeddings * self.hidden_size

    @property
    def num_params(self) -> int:
        return self.num_linear_params + self.num_embedding_params + self.num_small_params

    @property
    def expert_dtype(self) -> str:
        """The dtype of the routed experts: gpt-oss ships them alone in MXFP4."""
        return (self.moe.expert_dtype or self.weight_dtype) if self.moe else self.weight_dtype

    @property
    def weight_bytes(self) -> int:
        """Bytes of the checkpoint on the GPU (FP8 per-channel scales, ~0.04%, left out;
        MXFP4's one scale byte per 32 values counted)."""
        return int(self.num_always_read_params * DTYPE_BYTES[self.weight_dtype]
                   + self.num_expert_params * DTYPE_BYTES[self.expert_dtype]
                   + (self.num_embedding_params + self.num_small_params) * 2)

    def attention_flops_per_pair(self) -> int:
        """FLOPs of one (query, key) pair in every full-attention layer: 4 x heads x head_dim
        (the score and the weighted value), or MLA's absorbed form (mla.py)."""
        layers = self.num_full_attention_layers
        if self.mla is not None:
            return layers * self.num_heads * self.mla.flops_per_pair_per_head()
        return 4 * layers * self.num_heads * self.head_dim

    def sliding_attention_flops_per_pair(self) -> int:
        """The same in the sliding-window layers."""
        return 4 * self.num_sliding_layers * self.num_heads * self.head_dim

    # -- the KV cache --------------------------------------------------------------------------

    @property
    def num_full_attention_layers(self) -> int:
        """Layers whose KV grows with the whole context (all but the sliding-window ones)."""
        return self.num_layers - self.num_sliding_layers

    def kv_values_per_token_per_layer(self) -> int:
        """Values one token caches in one layer: 2 x kv_heads x head_dim, or MLA's latent."""
        if self.mla is not None:
            return self.mla.cached_values_per_layer()
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str) -> int:
        """Keys and values of one token in every full-attention layer: layers x 2 x kv_heads x
        head_dim x bytes (MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes).

        kv_dtype "auto" means the model's activation dtype, which is 16-bit even for FP8
        checkpoints (vLLM's --kv-cache-dtype auto). Sliding-window layers hold only their window
        of each sequence (`sliding_kv_bytes_per_token`), so they are not counted per token here.
        """
        element_bytes = 2 if kv_dtype == "auto" else DTYPE_BYTES[kv_dtype]
        return self.num_full_attention_layers * self.kv_values_per_token_per_layer() * element_bytes

    def sliding_kv_bytes_per_token(self, kv_dtype: str) -> int:
        """One token's keys and values in the sliding-window layers (held for `sliding_window`
        tokens of each sequence only)."""
        element_bytes = 2 if kv_dtype == "auto" else DTYPE_BYTES[kv_dtype]
        return self.num_sliding_layers * self.kv_values_per_token_per_layer() * element_bytes

    def kv_bytes_per_token_per_gpu(self, kv_dtype: str, tensor_parallel_size: int) -> int:
        """One GPU's share of a token's keys and values under tensor parallelism: its
        num_kv_heads / tp KV heads, and at least one, since with more GPUs than KV heads vLLM
        gives each GPU a copy of one (`ModelConfig.get_num_kv_heads`, vllm/config/model.py).
        MLA's latent has no heads to split: every GPU keeps all of it (mla.py)."""
        if self.mla is not None:
            return self.kv_bytes_per_token(kv_dtype)
        heads_per_gpu = max(1, self.num_kv_heads // tensor_parallel_size)
        return self.kv_bytes_per_token(kv_dtype) // self.num_kv_heads * heads_per_gpu


# GPUs. Peaks from each vendor's datasheet, dense (the sparsity figures halved); memory_gib from
# torch's out-of-memory messages ("GPU 0 has a total capacity of ... GiB") seen on those cards;
# interconnect per direction (NVLink totals are quoted for both directions together).
GPUS = {
    "h100-sxm5": GpuSpec(
        "NVIDIA H100 SXM5 80GB", memory_gib=79.19, memory_bandwidth_gbs=3350, bf16_tflops=989.4,
        fp8_tflops=1978.9, interconnect_gbs=450,
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3,958 FP8 / 1,979 BF16 TFLOPS with "
               "sparsity, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s"),
    "h200": GpuSpec(
        "NVIDIA H200 SXM 141GB", memory_gib=139.80, memory_bandwidth_gbs=4800, bf16_tflops=989.4,
        fp8_tflops=1978.9, interconnect_gbs=450,
        source="NVIDIA H200 Tensor Core GPU datasheet: H100's compute, 141 GB HBM3e at 4.8 TB/s, "
               "NVLink 900 GB/s"),
    "b200": GpuSpec(
        "NVIDIA B200 180GB", memory_gib=178.35, memory_bandwidth_gbs=8000, bf16_tflops=2250.0,
        fp8_tflops=4500.0, interconnect_gbs=900,
        source="NVIDIA DGX/HGX B200 datasheets, per GPU: 72 PFLOPS FP8 with sparsity per 8 GPUs, "
               "1,440 GB HBM3e and 64 TB/s per 8 GPUs, NVLink 5 1.8 TB/s; the per-GPU split and "
               "clocks vary between B200 SKUs (uncertain to ~10%)"),
    "mi300x": GpuSpec(
        "AMD Instinct MI300X 192GB", memory_gib=191.98, memory_bandwidth_gbs=5300,
        bf16_tflops=1307.4, fp8_tflops=2614.9, interconnect_gbs=448,
        source="AMD Instinct MI300X datasheet: 1,307.4 BF16 / 2,614.9 FP8 TFLOPS dense, 192 GB HBM3 "
               "at 5.3 TB/s, Infinity Fabric 7 links x 64 GB/s per direction (all peers together; "
               "one peer gets 1/7 of it, so a ring all-reduce is slower: uncertain)"),
    "a100-80gb": GpuSpec(
        "NVIDIA A100 SXM4 80GB", memory_gib=79.15, memory_bandwidth_gbs=2039, bf16_tflops=312.0,
        fp8_tflops=None, interconnect_gbs=300,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 312 BF16 TFLOPS dense, 80 GB "
               "HBM2e at 2,039 GB/s, NVLink 600 GB/s"),
    "a100-80gb-pcie": GpuSpec(
        "NVIDIA A100 PCIe 80GB", memory_gib=79.15, memory_bandwidth_gbs=1935, bf16_tflops=312.0,
        fp8_tflops=None, interconnect_gbs=32,
        source="NVIDIA A100 Tensor Core GPU datasheet (PCIe 80GB): 312 BF16 TFLOPS dense at 300 W "
               "(it throttles sooner than the SXM4), 1,935 GB/s, PCIe Gen4 x16 64 GB/s both ways "
               "(an NVLink bridge pairs two cards at 600 GB/s); memory as the SXM4 card's"),
    "a100-40gb": GpuSpec(
        "NVIDIA A100 SXM4 40GB", memory_gib=39.39, memory_bandwidth_gbs=1555, bf16_tflops=312.0,
        fp8_tflops=None, interconnect_gbs=300,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB): 312 BF16 TFLOPS dense, 40 GB "
               "HBM2 at 1,555 GB/s, NVLink 600 GB/s"),
    "h20": GpuSpec(
        "NVIDIA H20 96GB", memory_gib=95.00, memory_bandwidth_gbs=4000, bf16_tflops=148.0,
        fp8_tflops=296.0, interconnect_gbs=450,
        source="NVIDIA H20 product brief as reported by the press (no public datasheet: "
               "uncertain): 296 FP8 / 148 BF16 TFLOPS dense, 96 GB HBM3 at 4.0 TB/s, NVLink "
               "900 GB/s; memory_gib from a torch message on an H20 96G"),
    "l4": GpuSpec(
        "NVIDIA L4 24GB", memory_gib=22.03, memory_bandwidth_gbs=300, bf16_tflops=121.0,
        fp8_tflops=242.5, interconnect_gbs=32,
        source="NVIDIA L4 Tensor Core GPU datasheet: 485 FP8 / 242 BF16 TFLOPS with sparsity, 24 "
               "GB GDDR6 at 300 GB/s, PCIe Gen4 x16 64 GB/s both ways"),
}

# Models: each checkpoint's `config.json` on Hugging Face (num_hidden_layers, hidden_size,
# num_attention_heads, num_key_value_heads, head_dim = hidden / heads unless the config says
# otherwise, intermediate_size, vocab_size, tie_word_embeddings). An FP8 preset is the same
# architecture with its linear layers in FP8 and the embeddings and LM head in 16-bit, as in the
# RedHatAI (Neural Magic) "-FP8" checkpoints and TensorRT-LLM's FP8 engines.
_LLAMA_3_70B = dict(num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, head_dim=128,
                    intermediate_size=28672, vocab_size=128256)
_LLAMA_3_70B_SOURCE = "config.json of meta-llama/Llama-3.3-70B-Instruct"
_LLAMA_3_8B = dict(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                   intermediate_size=14336, vocab_size=128256)
_LLAMA_3_8B_SOURCE = "config.json of meta-llama/Llama-3.1-8B-Instruct"
# Llama 2 70B: Llama 3 70B's layers with Llama 2's 32,000-token vocabulary.
_LLAMA_2_70B = dict(_LLAMA_3_70B, vocab_size=32000)
_LLAMA_2_70B_SOURCE = "config.json of meta-llama/Llama-2-70b-hf"
MODELS = {
    "llama-3.3-70b": ModelSpec("meta-llama/Llama-3.3-70B-Instruct", weight_dtype="bf16",
                               source=_LLAMA_3_70B_SOURCE, **_LLAMA_3_70B),
    "llama-3.3-70b-fp8": ModelSpec("Llama-3.3-70B-Instruct FP8", weight_dtype="fp8",
                                   source=_LLAMA_3_70B_SOURCE + "; FP8 linear layers as in "
                                          "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
                                   **_LLAMA_3_70B),
    "llama-3.1-405b-fp8": ModelSpec(
        "Llama-3.1-405B-Instruct FP8", num_layers=126, hidden_size=16384, num_heads=128,
        num_kv_heads=8, head_dim=128, intermediate_size=53248, vocab_size=128256,
        weight_dtype="fp8",
        source="config.json of meta-llama/Llama-3.1-405B-Instruct; every linear layer FP8 as in "
               "neuralmagic/Meta-Llama-3.1-405B-Instruct-FP8-dynamic (Meta's own -FP8 leaves "
               "attention in BF16: about 20% more weight bytes)"),
    "llama-3.1-8b": ModelSpec("meta-llama/Llama-3.1-8B-Instruct", weight_dtype="bf16",
                              source=_LLAMA_3_8B_SOURCE, **_LLAMA_3_8B),
    "llama-3.1-8b-fp8": ModelSpec("Llama-3.1-8B-Instruct FP8", weight_dtype="fp8",
                                  source=_LLAMA_3_8B_SOURCE + "; FP8 linear layers as in "
                                         "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
                                  **_LLAMA_3_8B),
    # A draft model for speculative decoding of the Llama 3 family: the same tokenizer.
    "llama-3.2-1b": ModelSpec("meta-llama/Llama-3.2-1B-Instruct", num_layers=16, hidden_size=2048,
                              num_heads=32, num_kv_heads=8, head_dim=64, intermediate_size=8192,
                              vocab_size=128256, weight_dtype="bf16", tied_embeddings=True,
                              source="config.json of meta-llama/Llama-3.2-1B-Instruct"),
    "llama-2-7b": ModelSpec("meta-llama/Llama-2-7b-hf", num_layers=32, hidden_size=4096,
                            num_heads=32, num_kv_heads=32, head_dim=128, intermediate_size=11008,
                            vocab_size=32000, weight_dtype="fp16",
                            source="config.json of meta-llama/Llama-2-7b-hf"),
    "llama-2-70b": ModelSpec("meta-llama/Llama-2-70b-hf", weight_dtype="fp16",
                             source=_LLAMA_2_70B_SOURCE, **_LLAMA_2_70B),
    "llama-2-70b-fp8": ModelSpec("Llama-2-70B FP8", weight_dtype="fp8",
                                 source=_LLAMA_2_70B_SOURCE + "; FP8 linear layers as in "
                                        "TensorRT-LLM's FP8 engines", **_LLAMA_2_70B),
    # Mistral's sliding window (4,096 tokens) is left out: every token attends to all before it.
    "mistral-7b": ModelSpec("mistralai/Mistral-7B-v0.1", num_layers=32, hidden_size=4096,
                            num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                            vocab_size=32000, weight_dtype="bf16",
                            source="config.json of mistralai/Mistral-7B-v0.1"),
    "qwen2.5-7b": ModelSpec("Qwen/Qwen2.5-7B-Instruct", num_layers=28, hidden_size=3584,
                            num_heads=28, num_kv_heads=4, head_dim=128, intermediate_size=18944,
                            vocab_size=152064, weight_dtype="bf16", attention_bias=True,
                            source="config.json of Qwen/Qwen2.5-7B-Instruct"),
    # The PagedAttention paper's model (Kwon et al., SOSP 2023, arXiv:2309.06180).
    "opt-13b": ModelSpec("facebook/opt-13b", num_layers=40, hidden_size=5120, num_heads=40,
                         num_kv_heads=40, head_dim=128, intermediate_size=20480, vocab_size=50272,
                         weight_dtype="fp16", num_mlp_matrices=2, tied_embeddings=True,
                         num_position_embeddings=2050, attention_bias=True,
                         source="config.json of facebook/opt-13b"),
}

# Models read from the config.json files in code/models/ (model_config.py), each the file its
# Hugging Face repository publishes (code/models/README.md names them and their licenses):
# a preset and `--model code/models/<file>` give the same numbers, because they are the same.
MODELS_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
CONFIG_PRESETS = {
    "qwen3-8b": ("Qwen3-8B.json", "Qwen/Qwen3-8B"),
    "mixtral-8x7b": ("Mixtral-8x7B-v0.1.json", "mistralai/Mixtral-8x7B-v0.1"),
    "qwen3-30b-a3b": ("Qwen3-30B-A3B.json", "Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": ("Qwen3-235B-A22B.json", "Qwen/Qwen3-235B-A22B"),
    "qwen3-235b-a22b-fp8": ("Qwen3-235B-A22B-FP8.json", "Qwen/Qwen3-235B-A22B-FP8"),
    "deepseek-v3": ("DeepSeek-V3.json", "deepseek-ai/DeepSeek-V3"),
    "gpt-oss-20b": ("gpt-oss-20b.json", "openai/gpt-oss-20b"),
    "gpt-oss-120b": ("gpt-oss-120b.json", "openai/gpt-oss-120b"),
    "llama-4-scout": ("Llama-4-Scout-17B-16E-Instruct.json",
                      "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
}


def model_from_config_json(path: str, name: Optional[str] = None) -> ModelSpec:
    """The ModelSpec of a Hugging Face config.json (a file, or a folder holding one)."""
    fields = model_fields(read_config_json(path), config_json_path(path))
    if name is not None:
        fields["name"] = name
        fields["source"] = f"config.json of {name} (code/models/{os.path.basename(path)})"
    return ModelSpec(**fields)


for _key, (_file, _repo) in CONFIG_PRESETS.items():
    MODELS[_key] = model_from_config_json(os.path.join(MODELS_FOLDER, _file), _repo)


@functools.lru_cache(maxsize=None)
def model_spec(model: str) -> ModelSpec:
    """`--model`: a preset's key, or a path to a config.json read once per run (the cache is
    speed only: the file's numbers are the same each time it is read)."""
    if model in MODELS:
        return MODELS[model]
    return model_from_config_json(model)


# vLLM's --quantization methods servesim prices, and --dtype's names for 16-bit weights.
QUANTIZATIONS = ("fp8", "mxfp4")
DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


def checkpoint_quantization(model: ModelSpec) -> Optional[str]:
    """The method a checkpoint ships quantized with (fp8, mxfp4), or None for 16-bit."""
    for dtype in (model.expert_dtype, model.weight_dtype):
        if dtype in QUANTIZATIONS:
            return dtype
    return None


def with_precision(model: ModelSpec, quantization: Optional[str], dtype: str) -> ModelSpec:
    """The model as `--quantization` and `--dtype` load it (vLLM's flags): `--quantization fp8`
    quantizes a 16-bit checkpoint's linear layers at load time (vLLM's online dynamic FP8);
    `--dtype` names the 16-bit type of an unquantized one. A checkpoint that ships quantized
    keeps its method (config.py refuses another, as vLLM does)."""
    if checkpoint_quantization(model) is not None:
        return model
    if quantization is not None:
        return replace(model, weight_dtype=quantization)
    if DTYPES[dtype] is not None:
        return replace(model, weight_dtype=DTYPES[dtype])
    return model


def default_max_model_len(model: str, lesson_default: int) -> int:
    """vLLM's default --max-model-len, the model's max_position_embeddings; `lesson_default` for
    a hand-written preset, which does not say it."""
    longest = model_spec(model).max_position_embeddings
    return lesson_default if longest is None else longest
