"""Speculative decoding as vLLM V1 runs it: drafts, how many the target accepts, what they cost.

A decode step streams every weight to produce one token per sequence. Speculative decoding lets a
cheap proposer guess the next k tokens (the drafts); the target model then computes the token it
sampled last step *and* the k drafts in one forward pass, as a small prefill of 1 + k tokens,
keeps the drafts up to the first one it would not have produced, and adds one token of its own:

    step n   the target computes  [t, d1, d2, d3]   t: the token sampled in step n-1
             it checks the drafts   d1 ok, d2 ok, d3 wrong          2 accepted
             tokens out             d1, d2, and its own token       1 + accepted = 3

vLLM V1's scheduler treats drafts as tokens like any other (scheduler.py applies the rules):

- a running decode asks for 1 + k tokens out of the same token budget; when the budget runs
  short its drafts are cut, and near `max_model_len` too;
- a request still in a prefill chunk gets no drafts; the step that finishes its prompt samples
  a token, and the proposer drafts after it;
- after the step the accepted count is known: `num_computed_tokens` gives back the rejected
  drafts (their KV slots stay allocated and later tokens overwrite them), 1 + accepted tokens
  come out at once, and the proposer drafts k more;
- EAGLE heads and draft models write KV for positions past the scheduled ones, so every
  allocation reserves k lookahead slots; a draft model also needs one more input slot per
  request, so each scheduled request costs one more token of budget.

Whether speculation pays is the clock's business (forward_model.py): verifying 1 + k tokens per
decode costs almost nothing while a step is memory-bound (the weights are read anyway) and costs
1 + k times the compute once it is compute-bound; the proposer's passes are priced by
`drafting_time_s` below. With acceptance a per draft the target emits, on average,
(1 - a^(k+1)) / (1 - a) tokens per step.

Left out: async scheduling (0.30.0's default with EAGLE, draft models and ngram_gpu: it schedules
the next step before this one's drafts are known), tree drafting, n-gram steps that find no match
(vLLM then drafts nothing for the request; servesim's n-gram always drafts k), padding a newly
admitted one-token step to 1 + k for CUDA graphs (0.30.0). With prefix caching, an EAGLE head
makes a request compute again the last block it found cached (kv_cache.py). The command line's
JSON is read in commands/speculative_flag.py. Facts and sources: vLLM 0.30.0's
vllm/config/speculative.py and vllm/v1/core/sched/scheduler.py; the history of what each
version accepts (commands/vllm_facts.py) from the same files at v0.18.0 and earlier, and from
vLLM's docs/features/README.md (the feature matrix) and
docs/features/speculative_decoding/README.md ("Known Feature Incompatibility").
"""

import random
from dataclasses import dataclass, field
from typing import Callable, Optional

from config import ConfigError
from dataclasses import replace

from presets import MODELS, ModelSpec, model_spec

MODELLED_METHODS = ("ngram", "ngram_gpu", "eagle", "eagle3", "draft_model", "mtp")
NO_GPU_WORK_METHODS = ("ngram", "ngram_gpu")  # a lookup in the tokens so far (CPU or GPU)
EAGLE_METHODS = ("eagle", "eagle3")           # a head fed the target's hidden states
# vLLM 0.30.0's other methods, and why servesim does not run them.
UNMODELLED_METHODS = {
    "medusa": "is not modelled by servesim",
    "mlp_speculator": "is not modelled by servesim",
    "suffix": "is not modelled by servesim (its draft length varies with the match)",
    "extract_hidden_states": "proposes nothing to verify",
    "dflash": "is not modelled by servesim",
    "dspark": "is not modelled by servesim",
    "custom_class": "is not modelled by servesim",
}
# EAGLE-3 heads predict over a reduced vocabulary of 10k-32k tokens (speculators v0.3.0 post,
# vllm-project.github.io _posts/2025-12-13-speculators-v030.md); servesim takes the largest.
EAGLE3_DRAFT_VOCAB_SIZE = 32_000


@dataclass(frozen=True)
class MeasuredAcceptance:
    """Per-position acceptance as vLLM reports it: entry i is the share of drafts whose first
    i + 1 tokens were all accepted (unconditional, so the entries never grow)."""
    per_position: tuple
    source: str


def iid_per_position(mean_acceptance_length: float, num_drafts: int) -> tuple:
    """The per-position acceptance a, a^2, ..., a^k of a chain whose every draft is accepted with
    the same probability a given the ones before it, with a chosen so that the mean acceptance
    length 1 + a + a^2 + ... + a^k equals the one measured. Bisection: the length grows with a."""
    low, high = 0.0, 1.0
    for _ in range(60):
        rate = (low + high) / 2
        if 1 + sum(rate ** (i + 1) for i in range(num_drafts)) < mean_acceptance_length:
            low = rate
        else:
            high = rate
    return tuple(rate ** (i + 1) for i in range(num_drafts))


# What each method accepts unless told otherwise: vLLM's own measurements, k = 3. n-gram and
# EAGLE-1 have none servesim could cite: their acceptance depends on the data (n-gram: how much
# the answer repeats the prompt, which servesim cannot see, having no text), so a run must say it.
DEFAULT_ACCEPTANCE = {
    "eagle3": MeasuredAcceptance(
        (0.7296, 0.5208, 0.3545),
        "vLLM's EAGLE-3 baseline: Llama-3.1-8B-Instruct with RedHatAI's speculator, MT-Bench, "
        "mean acceptance length 2.60 (tests/v1/spec_decode/test_acceptance_length.py, v0.18.0)"),
    "draft_model": MeasuredAcceptance(
        iid_per_position(mean_acceptance_length=2.86, num_drafts=3),
        "vLLM's draft-model reference: Qwen3-1.7B drafted by Qwen3-0.6B, InstructCoder, greedy, "
        "mean acceptance length 2.86 (tests/v1/e2e/spec_decode, v0.18.0), as one rate per draft"),
    # k = 1 measured; more drafts reuse the one MTP layer (vLLM), at the same rate each here.
    "mtp": MeasuredAcceptance(
        (0.85,),
        "DeepSeek-V3 Technical Report (arXiv:2412.19437), section 5.4.3: the second token's "
        "acceptance rate is 85-90% across generation topics; servesim takes 85%"),
}


def conditional_rates(per_position: tuple) -> tuple:
    """Unconditional per-position acceptance p_i to the chance c_i = p_i / p_(i-1) that draft i
    is accepted once every draft before it was (the rule of vLLM 0.30.0's synthetic sampler)."""
    previous = (1.0,) + tuple(per_position[:-1])
    return tuple(p / q if q > 0 else 0.0 for p, q in zip(per_position, previous))


@dataclass(frozen=True)
class Acceptance:
    """How the target judges a chain of drafts: draft i is accepted with probability
    `conditional_rates[i]` if every draft before it was; the first rejection ends the chain."""
    conditional_rates: tuple
    source: str

    def draw(self, num_drafts: int, rng: random.Random) -> int:
        """How many of `num_drafts` drafts the target accepts, one seeded draw per draft."""
        num_accepted = 0
        while num_accepted < num_drafts and rng.random() < self.conditional_rates[num_accepted]:
            num_accepted += 1
        return num_accepted

    def per_position(self) -> tuple:
        """The unconditional figures vLLM prints: position i accepted with all before it."""
        rates, product = [], 1.0
        for rate in self.conditional_rates:
            product *= rate
            rates.append(product)
        return tuple(rates)


@dataclass(frozen=True)
class DraftHeadSpec(ModelSpec):
    """An EAGLE head: one decoder layer of the target's width, fed the target's hidden states.

    Beside the layer it has an input projection (EAGLE fuses 2 vectors of width d, EAGLE-3 three
    hidden states) and an LM head: the target's own for EAGLE, a reduced-vocabulary one of its
    own for EAGLE-3. Embeddings are the target's.
    """
    num_fc_params: int = 0       # the input projection, d x (2 or 3) d
    owns_lm_head: bool = True    # EAGLE-3: loads an LM head of its own

    @property
    def num_always_read_params(self) -> int:
        """The decoder layer's weights and the input projection (read every pass)."""
        return super().num_always_read_params + self.num_fc_params

    @property
    def num_embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size if self.owns_lm_head else 0


def eagle_head(target: ModelSpec, method: str) -> DraftHeadSpec:
    """The head vLLM loads for `method` on `target`, sized from the target's shapes (the layer
    is about 3% of a Llama-3.1-8B; the notes' section A3 works the sizes through)."""
    num_fused = 3 if method == "eagle3" else 2
    return DraftHeadSpec(
        f"{method.upper()} head of {target.name}", num_layers=1, hidden_size=target.hidden_size,
        num_heads=target.num_heads, num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
        intermediate_size=target.intermediate_size,
        vocab_size=EAGLE3_DRAFT_VOCAB_SIZE if method == "eagle3" else target.vocab_size,
        weight_dtype="bf16", source="derived from the target's shapes",
        num_fc_params=num_fused * target.hidden_size * target.hidden_size,
        owns_lm_head=method == "eagle3")


def mtp_head(target: ModelSpec) -> DraftHeadSpec:
    """DeepSeek-V3's multi-token-prediction module, as vLLM loads it for method mtp: one more
    decoder layer of the target's kind (MLA, experts) per num_nextn_predict_layers, fed the
    target's hidden state and the next token's embedding through a 2d x d projection; the
    embeddings and LM head are the target's (DeepSeek-V3 report, section 2.2)."""
    num_layers = target.num_nextn_predict_layers
    moe = replace(target.moe, num_moe_layers=num_layers) if target.moe else None
    return DraftHeadSpec(
        f"MTP layer of {target.name}", num_layers=num_layers, hidden_size=target.hidden_size,
        num_heads=target.num_heads, num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
        intermediate_size=target.intermediate_size, vocab_size=target.vocab_size,
        weight_dtype=target.weight_dtype, source="the target's num_nextn_predict_layers",
        moe=moe, mla=target.mla, num_fc_params=2 * target.hidden_size * target.hidden_size,
        owns_lm_head=False)


@dataclass(frozen=True)
class Speculation:
    """What the scheduler asks of speculative decoding while it runs. The default, no drafts,
    is a scheduler that does not speculate."""
    num_speculative_tokens: int = 0  # k: drafts proposed after each step for each request
    num_lookahead_tokens: int = 0    # KV slots reserved beyond the scheduled tokens
    num_draft_slots: int = 0         # budget each scheduled request costs beyond its tokens
    acceptance: Optional[Acceptance] = None
    rng: Optional[random.Random] = None  # the run's seeded generator (main.simulate)

    def num_accepted(self, num_drafts: int) -> int:
        return self.acceptance.draw(num_drafts, self.rng)


NO_SPECULATION = Speculation()


@dataclass(frozen=True)
class SpeculativeConfig:
    """`--speculative-config`, with vLLM's keys and defaults (vllm/config/speculative.py)."""
    method: str                            # ngram, ngram_gpu, eagle, eagle3, draft_model, mtp
    num_speculative_tokens: int            # k, drafts per step
    model: Optional[str] = None            # draft_model: a --model preset; eagle*: the head
    prompt_lookup_min: Optional[int] = None  # n-gram: shortest match looked up (tokens); read
    prompt_lookup_max: Optional[int] = None  # and checked as vLLM does, without effect here:
    #                                          servesim has no tokens to match
    draft_tensor_parallel_size: Optional[int] = None  # None: the target's
    rejection_sample_method: str = "standard"  # or "synthetic": acceptance as given below
    synthetic_acceptance_rates: Optional[tuple] = None   # per position, unconditional
    synthetic_acceptance_length: Optional[float] = None  # mean acceptance length instead
    acceptance_rate: Optional[float] = None  # --spec-acceptance-rate (servesim's own flag)

    # -- what the scheduler and the memory plan need ------------------------------------------

    @property
    def num_lookahead_tokens(self) -> int:
        """EAGLE heads and draft models write KV k positions ahead (vllm/config/vllm.py)."""
        return 0 if self.method in NO_GPU_WORK_METHODS else self.num_speculative_tokens

    @property
    def uses_eagle(self) -> bool:
        """A head fed the target's hidden states: with prefix caching, the last block a request
        finds cached is computed again, for the hidden states it needs (vLLM's use_eagle)."""
        return self.method in EAGLE_METHODS or self.method == "mtp"

    @property
    def num_draft_slots(self) -> int:
        """vLLM's max_num_new_slots_for_drafting: a draft model's first pass takes one more
        input token per request, so every scheduled request costs one more token of budget."""
        return 1 if self.method == "draft_model" else 0

    def draft_tp(self, target_tp: int) -> int:
        return self.draft_tensor_parallel_size or target_tp

    def drafter_model(self, target: ModelSpec) -> Optional[ModelSpec]:
        """The model whose passes propose the drafts; None for n-gram lookups (no GPU work)."""
        if self.method == "draft_model":
            return MODELS[self.model]
        if self.method in EAGLE_METHODS:
            return eagle_head(target, self.method)
        if self.method == "mtp":
            return mtp_head(target)
        return None

    def speculation(self, rng: random.Random) -> Speculation:
        return Speculation(self.num_speculative_tokens, self.num_lookahead_tokens,
                           self.num_draft_slots, self.acceptance(), rng)

    def acceptance(self) -> Acceptance:
        """Servesim's --spec-acceptance-rate, vLLM's synthetic rates, or the method's default;
        a default measured at k = 3 is cut to k drafts, or extended with its last rate."""
        k = self.num_speculative_tokens
        if self.acceptance_rate is not None:
            return Acceptance((self.acceptance_rate,) * k,
                              f"--spec-acceptance-rate {self.acceptance_rate:g} per draft")
        if self.synthetic_acceptance_rates is not None:
            return Acceptance(conditional_rates(self.synthetic_acceptance_rates),
                              "synthetic_acceptance_rates")
        if self.synthetic_acceptance_length is not None:
            return Acceptance(conditional_rates(rates_for_length(self.synthetic_acceptance_length,
                                                                 k)),
                              f"synthetic_acceptance_length {self.synthetic_acceptance_length:g}")
        measured = DEFAULT_ACCEPTANCE[self.method]
        rates = conditional_rates(measured.per_position)
        rates = (rates + rates[-1:] * k)[:k]
        return Acceptance(rates, measured.source)

    # -- what the proposer costs ---------------------------------------------------------------

    def drafting_time_s(self, batch, price: Callable[..., float]) -> float:
        """Seconds the proposer spends in a step, after the target's pass (vLLM's eagle.py and
        draft_model.py `propose`). `price(num_tokens, num_seqs, num_pairs, num_context_tokens)`
        prices one pass of the drafter (forward_model.RooflineClock.price).

        The first pass runs over every token of the step, prompt chunks too, so that the
        drafter holds KV for them (a draft model takes one more token per request); k - 1 more
        passes run one token per request. An n-gram lookup costs no GPU work.
        """
        if self.method in NO_GPU_WORK_METHODS:
            return 0.0
        num_seqs = batch.num_seqs
        first_s = price(batch.num_scheduled_tokens + self.num_draft_slots * num_seqs, num_seqs,
                        batch.num_attention_pairs, batch.num_context_tokens)
        context = batch.num_context_tokens + batch.num_scheduled_tokens
        next_s = price(num_seqs, num_seqs, context + num_seqs, context)
        return first_s + (self.num_speculative_tokens - 1) * next_s

    # -- checks that need the target ------------------------------------------------------------

    def validate(self, target_name: str, target_tp: int) -> None:
        """vLLM's refusals that need the target (its vocabulary, its tensor-parallel size), and
        servesim's own: an acceptance to draw from."""
        if self.method in UNMODELLED_METHODS:
            raise ConfigError(f"--speculative-config method {self.method!r} "
                              f"{UNMODELLED_METHODS[self.method]}; servesim runs "
                              f"{', '.join(MODELLED_METHODS)}")
        draft_tp = self.draft_tensor_parallel_size
        if draft_tp is not None and draft_tp not in (1, target_tp):
            raise ConfigError(f"--speculative-config draft_tensor_parallel_size {draft_tp} must be "
                              f"1 or the target's --tensor-parallel-size {target_tp} (as in vLLM)")
        if self.method == "draft_model":
            self._validate_draft_model(target_name, target_tp)
        if self.method == "mtp" and model_spec(target_name).num_nextn_predict_layers == 0:
            raise ConfigError(f"--speculative-config method mtp needs a target with "
                              f"multi-token-prediction layers (num_nextn_predict_layers in its "
                              f"config.json, e.g. deepseek-v3); {target_name} has none")
        self._validate_acceptance()

    def _validate_draft_model(self, target_name: str, target_tp: int) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"--speculative-config model {self.model!r}: a draft model is a "
                              f"--model preset here, e.g. llama-3.2-1b; choose one of "
                              f"{', '.join(MODELS)} (an EAGLE head needs method eagle or eagle3)")
        if self.draft_tp(target_tp) != target_tp:
            raise ConfigError(f"--speculative-config draft_tensor_parallel_size "
                              f"{self.draft_tp(target_tp)}: vLLM's draft models run at the "
                              f"target's --tensor-parallel-size {target_tp}; give {target_tp}")
        target, draft = MODELS.get(target_name), MODELS[self.model]
        if target is not None and draft.vocab_size != target.vocab_size:  # (unknown: see lookup)
            raise ConfigError(f"--speculative-config model {self.model} has a vocabulary of "
                              f"{draft.vocab_size:,} tokens and --model {target_name} one of "
                              f"{target.vocab_size:,}: target and draft must share it (vLLM "
                              f"refuses this too); pick a draft of the target's family")

    def _validate_acceptance(self) -> None:
        rate = self.acceptance_rate
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise ConfigError(f"--spec-acceptance-rate must be in [0, 1], got {rate:g}")
        synthetic = self.rejection_sample_method == "synthetic"
        if rate is not None and synthetic:
            raise ConfigError("--spec-acceptance-rate and --speculative-config's synthetic "
                              "acceptance say the same thing twice; give one of them")
        if rate is None and not synthetic and self.method not in DEFAULT_ACCEPTANCE:
            raise ConfigError(
                f"--speculative-config method {self.method}: servesim has no published "
                f"acceptance to default to (it depends on the data, and servesim has no text); "
                f"give --spec-acceptance-rate A (the chance each draft is accepted), or vLLM's "
                f'"rejection_sample_method": "synthetic" with "synthetic_acceptance_rates"')

    def describe(self) -> str:
        """One line for the report header."""
        proposer = {"ngram": "n-gram lookup in the tokens so far, on the CPU: no GPU work",
                    "ngram_gpu": "n-gram lookup in the tokens so far, on the GPU: no model",
                    "eagle": "EAGLE head: 1 layer of the target's width",
                    "eagle3": f"EAGLE-3 head: 1 layer of the target's width, a "
                              f"{EAGLE3_DRAFT_VOCAB_SIZE:,}-token vocabulary",
                    "draft_model": f"draft model {self.model}",
                    "mtp": "the target's multi-token-prediction layer"}[self.method]
        per_position = "/".join(f"{100 * p:.0f}" for p in self.acceptance().per_position())
        return (f"speculative decoding: {self.method}, k = {self.num_speculative_tokens} drafts "
                f"({proposer}); acceptance per position {per_position}%")


def rates_for_length(mean_acceptance_length: float, num_drafts: int) -> tuple:
    """vLLM 0.30.0's `synthetic_acceptance_length`: the per-position rates with that mean and
    the least spread, every draft accepted up to the whole part, the next with the rest."""
    num_accepted = mean_acceptance_length - 1
    whole = int(num_accepted)
    rates = [1.0] * whole + [num_accepted - whole] + [0.0] * num_drafts
    return tuple(rates[:num_drafts])


# -- what a run reports ------------------------------------------------------------------------

@dataclass
class SpecDecodingStats:
    """vLLM's counters (v1/spec_decode/metrics.py), summed over a run: one draft is one
    request's chain verified in one step, however many tokens it had."""
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list = field(default_factory=list)

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        per_pos = self.num_accepted_tokens_per_pos
        per_pos.extend([0] * (num_draft_tokens - len(per_pos)))
        for position in range(num_accepted_tokens):
            per_pos[position] += 1

    def metrics(self) -> dict:
        """The run's figures under the names vLLM's Prometheus counters use and those `vllm bench
        serve --save-result` writes (the same counts twice, so that either reader finds its
        own). Rates are in %, as vLLM prints them; per-position ones are fractions, as it saves
        them."""
        drafts, accepted = self.num_drafts, self.num_accepted_tokens
        length = 1 + accepted / drafts
        return {
            "spec_decode_num_drafts": drafts,
            "spec_decode_num_draft_tokens": self.num_draft_tokens,
            "spec_decode_num_accepted_tokens": accepted,
            "spec_decode_acceptance_rate": 100 * accepted / self.num_draft_tokens,
            "spec_decode_mean_acceptance_length": length,
            "spec_decode_draft_tokens": self.num_draft_tokens,
            "spec_decode_accepted_tokens": accepted,
            "spec_decode_acceptance_length": length,
            "spec_decode_per_position_acceptance_rates": [
                count / drafts for count in self.num_accepted_tokens_per_pos],
        }
