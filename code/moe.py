"""Mixture-of-Experts: why a decode step reads few weights and a big batch reads them all.

An MoE layer replaces the one MLP of a dense layer with E small MLPs (the routed experts), a
router that sends each token to k of them, and in some models a shared expert every token uses:

    token ──► router (hidden x E scores) ──► top-k experts ─┐
          └──────────────────────────────► shared expert ──┴──► sum ──► next layer

Per token the layer computes on its *active* parameters only (k experts + shared), which is why
DeepSeek-V3 (671 B parameters) computes like a 37 B dense model. The bytes are another matter: a
step reads every expert at least one of its tokens picked. With T tokens each picking k of E
experts at random, an expert is missed by all of them with probability (1 - k/E)^T, so

    experts touched per layer = E x (1 - (1 - k/E)^T)            (the expectation)

One token touches k; 256 tokens on DeepSeek-V3 (k = 8, E = 256) touch 256 x (1 - (31/32)^256),
about 255.9: a big batch streams every expert. servesim takes this expectation, not a seeded
draw: it is the mean of the draw, needs no random numbers in the clock (so a step's price is a
function of its batch alone), and assumes what a trained router with a load-balancing loss aims
at: every expert equally likely. Left out: expert load imbalance (real routers favour some
experts: hot experts make some GPUs wait) and vLLM's EPLB (expert-parallel load balancing, which
replicates hot experts); servesim's routing is uniform, so EPLB would change nothing here.

Expert parallelism (`--enable-expert-parallel`, vLLM's flag) puts E / ep whole experts on each
of ep GPUs instead of a 1/tp slice of every expert. The expected bytes a GPU reads are the same
(its experts are touched with the same probability); what changes is the traffic: each MoE layer
sends every token's hidden state to the GPUs holding its k experts (dispatch) and brings the k
results back (combine), two all-to-alls, instead of the one all-reduce tensor parallelism pays
after the MLP.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeSpec:
    """The experts of an MoE model, as its config.json names them (model_config.py)."""
    num_experts: int                 # E, routed experts per MoE layer (n_routed_experts,
    #                                  num_experts, num_local_experts)
    experts_per_token: int           # k (num_experts_per_tok)
    expert_intermediate_size: int    # one expert's MLP width (moe_intermediate_size)
    num_moe_layers: int              # layers whose MLP is experts; the rest are dense
    shared_intermediate_size: int = 0  # the shared expert(s), all together (0: none)
    expert_dtype: str = ""           # "" = the model's weight dtype; "mxfp4" for gpt-oss
    num_expert_matrices: int = 3     # gate, up, down (SwiGLU), as the model's dense MLP

    def expert_params(self, hidden_size: int) -> int:
        """One routed expert's weights in one layer."""
        return self.num_expert_matrices * hidden_size * self.expert_intermediate_size

    def shared_params(self, hidden_size: int) -> int:
        """The shared expert(s) of one layer: used by every token, like a dense MLP."""
        return self.num_expert_matrices * hidden_size * self.shared_intermediate_size

    def router_params(self, hidden_size: int) -> int:
        """The router of one layer: a hidden x E matrix (kept in 16-bit by every checkpoint)."""
        return hidden_size * self.num_experts


def expected_experts_touched(num_experts: int, experts_per_token: int, num_tokens: int) -> float:
    """Distinct experts T tokens pick, each picking k of E uniformly: E x (1 - (1 - k/E)^T).

    Worked example (Mixtral, E = 8, k = 2): one token touches 2, four tokens 8 x (1 - 0.75^4) =
    5.47, sixteen 7.92.
    """
    if num_tokens <= 0:
        return 0.0
    missed = (1 - experts_per_token / num_experts) ** num_tokens
    return num_experts * (1 - missed)


def all_to_all_bytes_per_token(hidden_size: int, experts_per_token: int, ep: int,
                               activation_bytes: int) -> float:
    """Bytes one token sends off its GPU in one MoE layer: its hidden state to each of its k
    experts (dispatch) and their outputs back (combine), the (ep - 1) / ep of them that live on
    other GPUs. Both in 16-bit (DeepEP can dispatch in FP8: half the dispatch bytes)."""
    off_gpu = (ep - 1) / ep
    return 2 * experts_per_token * hidden_size * activation_bytes * off_gpu


@dataclass(frozen=True)
class ExpertStreaming:
    """What one step's experts cost one GPU, worked out once per run (forward_model.py calls
    `stream_s` and `all_to_all_s` per step).

    Each GPU holds E / ep whole experts (expert parallelism) or a 1/tp slice of all E (tensor
    parallelism): either way it reads `bytes_per_expert_per_gpu` for every expert the step's
    tokens touch, in expectation. The compute on the picked experts is in the clock's active
    parameters; the shared experts and the router are read every step like dense weights.
    """
    num_experts: int
    experts_per_token: int
    num_moe_layers: int
    stream_s_per_expert: float    # one expert of every MoE layer, this GPU's part, seconds
    all_to_all_s_per_token: float  # expert parallelism: dispatch + combine bytes on the link
    all_to_all_fixed_s: float      # their latency, every MoE layer, whatever the tokens

    def stream_s(self, num_tokens: int) -> float:
        """Seconds to read the experts `num_tokens` tokens touch, in every MoE layer."""
        touched = expected_experts_touched(self.num_experts, self.experts_per_token, num_tokens)
        return touched * self.stream_s_per_expert

    def all_to_all_s(self, num_tokens: int) -> float:
        """Dispatch and combine of `num_tokens` tokens' hidden states (0 without EP)."""
        return num_tokens * self.all_to_all_s_per_token + self.all_to_all_fixed_s


def expert_streaming(moe: MoeSpec, hidden_size: int, expert_bytes_per_param: float,
                     num_gpus: int, bytes_per_s: float, expert_parallel: bool,
                     link_bytes_per_s: float, activation_bytes: int,
                     round_s: float) -> ExpertStreaming:
    """The per-step expert costs of `moe` spread over `num_gpus` GPUs (see ExpertStreaming).

    With expert parallelism each GPU sends its 1/ep share of the step's tokens to the GPUs
    holding their experts and gets the results back: `all_to_all_bytes_per_token` each, over a
    link of `link_bytes_per_s`, plus one round of `round_s` per all-to-all.
    """
    expert_bytes = moe.num_moe_layers * moe.expert_params(hidden_size) * expert_bytes_per_param
    per_token_s, fixed_s = 0.0, 0.0
    if expert_parallel and num_gpus > 1:
        per_token = all_to_all_bytes_per_token(hidden_size, moe.experts_per_token, num_gpus,
                                               activation_bytes)
        per_token_s = moe.num_moe_layers * per_token / num_gpus / link_bytes_per_s
        fixed_s = moe.num_moe_layers * 2 * round_s
    return ExpertStreaming(moe.num_experts, moe.experts_per_token, moe.num_moe_layers,
                           expert_bytes / num_gpus / bytes_per_s, per_token_s, fixed_s)
