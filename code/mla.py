"""Multi-head Latent Attention (DeepSeek-V2/V3): cache one small latent per token, not K and V.

Plain attention caches, per layer and token, a key and a value for every KV head. MLA caches a
compressed latent c (kv_lora_rank values) and one shared rotary key (qk_rope_head_dim values),
from which every head's key and value are rebuilt by up-projections:

    hidden ──► W_DKV ──► c (512) ──► W_UK ──► 128 keys   (qk_nope_head_dim 128 each)
           └─► W_KR  ──► k_rope (64), shared by every head
                       c (512) ──► W_UV ──► 128 values (v_head_dim 128 each)

    cached per token:  61 layers x (512 + 64) values x 2 bytes = 70,272 bytes (DeepSeek-V3)
    as plain attention: 61 x 128 heads x (192 key + 128 value) x 2 bytes = 4,997,120 bytes

At decode vLLM absorbs W_UK into the query and W_UV into the output projection, so attention
runs straight on the latent: per head and (query, key) pair, a dot product over 512 + 64 values
for the score and a weighted sum over the 512 for the output, 2 x (576 + 512) FLOPs, against
4 x head_dim for plain attention. servesim prices every pair so (prefill's unabsorbed form costs
fewer FLOPs per pair and more in up-projections: left out). The latent has no heads to split:
under tensor parallelism every GPU keeps the whole latent of every token (vLLM's MLA backends),
which is why DeepSeek is served with data-parallel attention (vLLM docs, "Data Parallel
Deployment": DP attention avoids duplicating the KV cache of MLA models across TP ranks).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class MlaSpec:
    """MLA's ranks and head dims, as config.json names them."""
    kv_lora_rank: int        # the cached latent (512 on DeepSeek-V2/V3)
    qk_rope_head_dim: int    # the shared rotary key, cached too (64)
    qk_nope_head_dim: int    # each head's key from the latent (128)
    v_head_dim: int          # each head's value from the latent (128)
    q_lora_rank: int = 0     # queries through a low-rank step too (1536); 0: a full projection

    def cached_values_per_layer(self) -> int:
        """Values one token keeps in one layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def attention_params_per_layer(self, hidden_size: int, num_heads: int) -> int:
        """The projections: queries (low-rank or not), the latent and rotary key, the latent's
        up-projection to every head's key and value, and the output."""
        q_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = hidden_size * self.q_lora_rank + self.q_lora_rank * num_heads * q_head_dim
        else:
            q = hidden_size * num_heads * q_head_dim
        kv_down = hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        out = num_heads * self.v_head_dim * hidden_size
        return q + kv_down + kv_up + out

    def norm_params_per_layer(self) -> int:
        """The RMSNorms on the query and KV latents."""
        return self.q_lora_rank + self.kv_lora_rank

    def flops_per_pair_per_head(self) -> int:
        """Decode's absorbed attention: score over latent + rotary key, output over latent."""
        return 2 * (self.cached_values_per_layer() + self.kv_lora_rank)

    def plain_kv_values_per_layer(self, num_heads: int) -> int:
        """What plain attention would cache with the same heads: keys and values of each."""
        return num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)
