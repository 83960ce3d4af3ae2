"""Multi-head latent attention (MLA, DeepSeek-V2/V3): its weights and its compressed KV cache.

MLA caches, per token and layer, one latent vector of `kv_lora_rank` elements plus a shared
rotary key of `qk_rope_head_dim` elements, instead of K and V per head. All heads read the same
latent, so the cache cannot be split by heads: under tensor parallelism vLLM keeps the whole
latent on every GPU.

Weights per layer (DeepSeek naming): q_a (h → q_lora_rank), its norm, q_b (q_lora_rank →
heads × (nope + rope)); kv_a (h → kv_lora_rank + rope), its norm, kv_b (kv_lora_rank →
heads × (nope + v)); o (heads × v → h). Without `q_lora_rank` queries come straight from h.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MLASpec:
    """Widths of multi-head latent attention."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None  # None: queries are projected straight from the hidden state

    @property
    def latent_dim(self) -> int:
        """Elements cached per token and layer: the latent plus the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params(self, hidden_size: int, num_heads: int) -> int:
        """Attention parameters of one layer, norms included."""
        h, n = hidden_size, num_heads
        if self.q_lora_rank is None:
            query = h * n * self.qk_head_dim
        else:
            rank = self.q_lora_rank
            query = h * rank + rank + rank * n * self.qk_head_dim
        kv_down = h * self.latent_dim + self.kv_lora_rank
        kv_up = self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
        out = n * self.v_head_dim * h
        return query + kv_down + kv_up + out

    def replicated_params(self, hidden_size: int) -> int:
        """The down-projections and their norms: vLLM replicates them on every GPU."""
        h = hidden_size
        query = 0 if self.q_lora_rank is None else h * self.q_lora_rank + self.q_lora_rank
        return query + h * self.latent_dim + self.kv_lora_rank

    def kv_bytes_per_token(self, num_layers: int, kv_dtype_bytes: float) -> float:
        """Cache bytes of one token over all layers: one latent per layer, no K/V pair."""
        return num_layers * self.latent_dim * kv_dtype_bytes


__all__ = ["MLASpec"]
