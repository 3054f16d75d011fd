"""What vLLM itself does with the engine flags: its defaults, and what each version refuses.

Facts only, each with where it was read: vLLM 0.30.0's code (the version servesim follows), and
v0.18.0's (the lesson's, read in the PyPI wheel and sdist of vllm 0.18.0, tag v0.18.0), each
with its file (and line) in that version's vllm/ tree; older versions' from their PyPI wheels. `diagnose` reads its "Config read" and its compatibility check from here, and
`lesson-check` its verdict on the lesson's v0.18.0 gotcha.
"""

from dataclasses import dataclass

from config import EngineConfig
from presets import GpuSpec

FOLLOWED, LESSON = "0.30.0", "0.18.0"  # the version servesim follows; the lesson's

# Chunked prefill beside a draft model, version by version: (versions, refused, what that
# version's code does). Notes, sections 0 and A4, read in each version's PyPI wheel (0.6.3.post1
# and 0.6.4.post1 vllm/config.py, 0.14.0 and 0.15.0 config/speculative.py) and v0.18.0's code,
# docs and tests; 0.30.0's config/speculative.py and config/vllm.py have no such check either.
CHUNKED_PREFILL_WITH_A_DRAFT_MODEL = [
    ("V0 up to 0.6.3", True, 'chunked prefill and any speculation are "currently mutually '
                             'exclusive"'),
    ("V0 from 0.6.4", False, "draft models and n-gram run beside it, but EAGLE, Medusa and MLP "
                             "drafters stay refused"),
    ("V1 0.8 to 0.14", False, "draft models are refused outright, chunked prefill or not"),
    ("V1 from 0.15.0 (v0.18.0 included)", False, "every method runs beside chunked prefill"),
]


def serve_batch_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) for a GPU, as vLLM 0.30.0's
    EngineArgs.get_batch_defaults picks them for the API server: by the card's memory, A100s
    apart (their throughput fell with the larger budget, PR #17885). v0.18.0 had no >= 160 GiB
    row: 8,192 and 1,024 there too."""
    if gpu.memory_gib >= 160:
        return 16384, 1024
    if gpu.memory_gib >= 70 and "A100" not in gpu.name:
        return 8192, 1024
    return 2048, 256


SERVE_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.30.0's default (CacheConfig, config/cache.py)


def serve_defaults(gpu: GpuSpec, chunked: bool, max_model_len: int) -> dict[str, object]:
    """The scheduler and memory flags `vllm serve` 0.30.0 sets itself when they are left out,
    for this GPU, by their argparse names. Without chunked prefill the budget is at least
    max_model_len (EngineArgs._set_default_max_num_seqs_and_batched_tokens_args)."""
    budget, seqs = serve_batch_defaults(gpu)
    return {"max_num_batched_tokens": budget if chunked else max(budget, max_model_len),
            "max_num_seqs": seqs, "gpu_memory_utilization": SERVE_GPU_MEMORY_UTILIZATION}


@dataclass(frozen=True)
class FlagFact:
    """One engine flag: what it sets in the scheduler, and vLLM's default."""
    flag: str
    field: str            # the EngineConfig field it sets ("" for --enable-chunked-prefill)
    controls: str         # what it sets, in the lesson's terms
    if_changed: str       # why a value other than vLLM's matters


FLAG_FACTS = [
    FlagFact("--tensor-parallel-size", "tensor_parallel_size",
             "GPUs sharing every weight and KV head",
             "more GPUs: the weights and KV split, more HBM for blocks, a faster weight stream"),
    FlagFact("--gpu-memory-utilization", "gpu_memory_utilization",
             "HBM share vLLM takes: sizes the pool",
             "every 0.01 of it is that share of HBM taken from (or given to) the KV blocks"),
    FlagFact("--kv-cache-dtype", "kv_cache_dtype", "bytes of each cached token",
             "fp8 halves a token's KV: twice the tokens in the same blocks"),
    FlagFact("--block-size", "block_size", "tokens per KV block (a page)",
             "larger blocks waste more of each request's last block; smaller ones mean more "
             "block-table entries"),
    FlagFact("--num-gpu-blocks-override", "num_gpu_blocks_override",
             "the pool's size, set by hand",
             "the pool no longer follows the memory: it may be far smaller than the GPU holds"),
    FlagFact("--max-model-len", "max_model_len", "longest request; the pool holds one",
             "longer requests are rejected; a shorter cap lets a small pool start"),
    FlagFact("--max-num-seqs", "max_num_seqs", "requests running at most: the seats",
             "fewer seats: requests wait with KV to spare; more: a longer decode step"),
    FlagFact("--max-num-batched-tokens", "max_num_batched_tokens",
             "tokens per step: decodes, then chunks",
             "a smaller budget: shorter steps beside a prompt, slower prefill; a larger one the "
             "reverse"),
    FlagFact("--long-prefill-token-threshold", "long_prefill_token_threshold",
             "cap on one prompt's tokens a step",
             "a long prompt takes fewer tokens a step, so short ones behind it start sooner"),
    FlagFact("--enable-chunked-prefill", "", "prompts sliced into the budget",
             "off: a whole prompt in one step, and every decode beside it waits for it"),
    FlagFact("--enable-prefix-caching", "enable_prefix_caching",
             "full blocks found again by hash",
             "off: shared prefixes are computed again"),
    FlagFact("--speculative-config", "speculative_config",
             "drafts verified from the same budget",
             "each decode asks for 1 + k tokens; the proposer's weights and KV take HBM"),
]


def vllm_default(flag: str, gpu: GpuSpec, chunked: bool) -> str:
    """vLLM 0.30.0's default for an engine flag, as text (v0.18.0's where it differs); the
    budget without chunked prefill is at least max_model_len."""
    budget, seqs = serve_batch_defaults(gpu)
    return {
        "--tensor-parallel-size": "1",
        "--gpu-memory-utilization": f"0.92 ({LESSON}: 0.9)",  # config/cache.py in each
        "--kv-cache-dtype": "auto",
        "--block-size": "16",
        "--num-gpu-blocks-override": "none",
        "--max-model-len": "the model's context",
        "--max-num-seqs": f"{seqs}",
        "--max-num-batched-tokens": f"{budget}" if chunked else f"max({budget}, max_model_len)",
        "--long-prefill-token-threshold": "0",
        "--enable-chunked-prefill": "on",
        "--enable-prefix-caching": "on",
        "--speculative-config": "none",
    }[flag]


def differs_from_vllm(flag: str, config: EngineConfig, chunked: bool, gpu: GpuSpec) -> bool:
    """Does the config set this flag otherwise than `vllm serve` would by default?"""
    budget, seqs = serve_batch_defaults(gpu)
    value = {
        "--tensor-parallel-size": config.tensor_parallel_size != 1,
        "--gpu-memory-utilization": config.gpu_memory_utilization != SERVE_GPU_MEMORY_UTILIZATION,
        "--kv-cache-dtype": config.kv_cache_dtype != "auto",
        "--block-size": config.block_size != 16,
        "--num-gpu-blocks-override": config.num_gpu_blocks_override is not None,
        "--max-model-len": False,  # servesim's presets know no model's context to compare
        "--max-num-seqs": config.max_num_seqs != seqs,
        "--max-num-batched-tokens": config.token_budget(chunked) != (
            budget if chunked else max(config.max_model_len, budget)),
        "--long-prefill-token-threshold": config.long_prefill_token_threshold != 0,
        "--enable-chunked-prefill": not chunked,
        "--enable-prefix-caching": not config.enable_prefix_caching,
        "--speculative-config": config.speculative_config is not None,
    }
    return value[flag]


@dataclass(frozen=True)
class Compatibility:
    """What vLLM does at start-up with some of the flags given."""
    flags: str       # the flags it is about
    status: str      # "refused", "warns" or "accepted"
    versions: str    # the versions it holds for
    text: str        # what happens, and where it was read

    def as_json(self) -> dict:
        return {"flags": self.flags, "status": self.status, "versions": self.versions,
                "text": self.text}


def compatibility(config: EngineConfig, chunked: bool) -> list[Compatibility]:
    """vLLM's start-up checks that concern the flags given (notes, sections 0, A1, A4, C)."""
    checks = []
    if config.speculative_config is not None:
        checks += _speculation_checks(config, chunked)
    if not chunked:
        checks.append(Compatibility(
            "--no-enable-chunked-prefill", "warns", f"{LESSON} ({FOLLOWED} alike)",
            "vLLM logs that a generate model 'does not officially support disabling chunked "
            "prefill' and refuses a --max-num-batched-tokens below --max-model-len (servesim "
            "refuses it too); engine/arg_utils.py, config/scheduler.py"))
    if not config.enable_prefix_caching:
        checks.append(Compatibility(
            "--no-enable-prefix-caching", "accepted", f"{LESSON}, {FOLLOWED}",
            "prefix caching is on by default in V1 (config/cache.py); off, nothing is found "
            "again, which costs nothing on traffic without shared prefixes"))
    return checks


def memory_refusal(refusal: str) -> Compatibility:
    """The start-up check a config that does not fit fails: vLLM 0.30.0's
    v1/core/kv_cache_utils.py refuses 'No available memory for the cache blocks' and, when the
    KV holds less than one max_model_len sequence, 'To serve at least one request with the
    model's max seq len ...'; v0.18.0 checks the same."""
    return Compatibility(
        "--gpu-memory-utilization, --kv-cache-dtype, --max-model-len, --tensor-parallel-size",
        "refused", f"{LESSON} and {FOLLOWED}",
        f"vLLM measures the memory left for KV blocks at start-up and refuses to serve when it "
        f"holds no block, or less than one --max-model-len sequence (v1/core/kv_cache_utils.py); "
        f"here: {refusal}")


def _speculation_checks(config: EngineConfig, chunked: bool) -> list[Compatibility]:
    speculative = config.speculative_config
    method, k = speculative.method, speculative.num_speculative_tokens
    checks = []
    if chunked:
        history = "; ".join(f"{versions}: {does}"
                            for versions, _, does in CHUNKED_PREFILL_WITH_A_DRAFT_MODEL)
        checks.append(Compatibility(
            f"--enable-chunked-prefill with --speculative-config method {method}", "accepted",
            f"V1 from 0.15.0: {LESSON} and {FOLLOWED}",
            "the lesson says v0.18.0 refuses chunked prefill with a draft model; its code, docs "
            "(the feature matrix marks them compatible) and tests run them together. By "
            f"version: {history}"))
    if method == "draft_model":
        budget = config.token_budget(chunked)
        checks.append(Compatibility(
            "--speculative-config draft_model and --max-num-batched-tokens", "accepted",
            f"{LESSON} and {FOLLOWED} differ",
            f"the draft model's extra input token per request comes off the budget: {LESSON} "
            f"takes max_num_seqs off it at start-up ({budget} - {config.max_num_seqs} = "
            f"{budget - config.max_num_seqs} left for tokens), {FOLLOWED} one token per request "
            "scheduled (config/vllm.py _set_max_num_scheduled_tokens); the draft's tensor-parallel "
            "size must equal the target's (v1/spec_decode/draft_model.py)"))
    if method == "ngram":
        checks.append(Compatibility(
            "--speculative-config method ngram with --async-scheduling", "refused",
            f"{LESSON} ({FOLLOWED} alike)",
            "an explicit --async-scheduling is refused unless the method is EAGLE, MTP, a draft "
            "model or ngram_gpu (config/vllm.py); left at its default, async scheduling turns "
            "itself off for CPU n-gram. ngram_gpu, new in 0.18.0, is the n-gram that runs with it"))
    needed = config.max_num_seqs * (k + 1)
    budget = config.token_budget(chunked)
    checks.append(Compatibility(
        "--speculative-config with --enable-lora", "refused" if budget < needed else "accepted",
        f"{LESSON} and {FOLLOWED}",
        f"with LoRA adapters vLLM refuses a --max-num-batched-tokens below max_num_seqs x (k + 1) "
        f"= {config.max_num_seqs} x {k + 1} = {needed:,}; this budget is {budget:,} "
        "(engine/arg_utils.py; servesim has no LoRA)"))
    return checks


def config_read(config, chunked: bool, gpu) -> list[dict]:
    """Each engine flag: its value here, vLLM's default, what it sets, whether it differs."""
    rows = []
    for fact in FLAG_FACTS:
        rows.append({"flag": fact.flag, "value": _value_text(fact.flag, config, chunked),
                     "vllm_default": vllm_default(fact.flag, gpu, chunked),
                     "controls": fact.controls,
                     "differs": differs_from_vllm(fact.flag, config, chunked, gpu),
                     "if_changed": fact.if_changed})
    return rows


def _value_text(flag: str, config, chunked: bool) -> str:
    speculative = config.speculative_config
    values = {
        "--tensor-parallel-size": config.tensor_parallel_size,
        "--gpu-memory-utilization": f"{config.gpu_memory_utilization:g}",
        "--kv-cache-dtype": config.kv_cache_dtype, "--block-size": config.block_size,
        "--num-gpu-blocks-override": config.num_gpu_blocks_override or "none",
        "--max-model-len": config.max_model_len, "--max-num-seqs": config.max_num_seqs,
        "--max-num-batched-tokens": config.token_budget(chunked),
        "--long-prefill-token-threshold": config.long_prefill_token_threshold,
        "--enable-chunked-prefill": "on" if chunked else "off",
        "--enable-prefix-caching": "on" if config.enable_prefix_caching else "off",
        "--speculative-config": (f"{speculative.method}, k = {speculative.num_speculative_tokens}"
                                 if speculative else "none"),
    }
    return str(values[flag])
