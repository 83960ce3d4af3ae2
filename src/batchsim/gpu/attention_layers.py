"""Per-layer attention kinds of a hybrid model: full, sliding-window and linear (state) layers.

A hybrid model mixes three kinds of token mixer (docs/design.md §3, "Hybrid attention"):

- full attention: each layer caches K and V of every token, so its KV grows with the context;
- sliding-window attention: a layer attends to the last `window` tokens only, so its KV per
  sequence is capped at `window` tokens (vLLM's hybrid allocator frees the blocks that fall out
  of the window);
- linear attention (Gated DeltaNet, Mamba-style): a layer keeps a fixed-size recurrent state
  per sequence (a convolution state and a key x value state matrix per value head), whatever
  the context.

`LayerKinds` counts the layers of each kind; `LinearAttentionSpec` holds the widths that size
a linear layer's state and weights. A model without `LayerKinds` is all full attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Hugging Face `layer_types` names of each kind (transformers' configs for gpt-oss, Gemma 3,
# Qwen3-Next and Qwen3.5 use these spellings).
FULL = "full_attention"
SLIDING = "sliding_attention"
LINEAR = "linear_attention"
LAYER_TYPE_NAMES = (FULL, SLIDING, LINEAR)

# vLLM keeps linear-attention (mamba) state in the model's dtype unless told otherwise
# (`mamba_ssm_cache_dtype: auto`), whatever the KV-cache dtype: bf16 here.
STATE_ELEMENT_BYTES = 2


class LayerKindsError(ValueError):
    """Layer kinds that do not describe a model; the message is one line."""


@dataclass(frozen=True, slots=True)
class LinearAttentionSpec:
    """Widths of a gated delta-net (linear attention) layer, Qwen3-Next's naming."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def conv_channels(self) -> int:
        """Channels the short convolution runs over: queries, keys and values."""
        keys = self.num_key_heads * self.key_head_dim
        return 2 * keys + self.num_value_heads * self.value_head_dim

    def state_elements(self) -> int:
        """Elements of one sequence's state in one layer: the last conv_kernel − 1 inputs of
        the convolution and one key x value matrix per value head."""
        conv = (self.conv_kernel - 1) * self.conv_channels
        recurrent = self.num_value_heads * self.key_head_dim * self.value_head_dim
        return conv + recurrent

    def params(self, hidden_size: int) -> int:
        """Weights of one layer: the q/k/v/z and b/a input projections, the convolution, the
        per-head decay and step bias, the output norm and the output projection."""
        h = hidden_size
        value_width = self.num_value_heads * self.value_head_dim
        qkvz = h * (2 * self.num_key_heads * self.key_head_dim + 2 * value_width)
        ba = h * 2 * self.num_value_heads
        conv = self.conv_channels * self.conv_kernel
        per_head = 2 * self.num_value_heads  # A_log and dt_bias
        return qkvz + ba + conv + per_head + self.value_head_dim + value_width * h

    def flops_per_token(self) -> float:
        """FLOPs of the recurrence per token and layer: the state is read, decayed, updated
        by a rank-one delta and read out by the query, each about 2 FLOPs per element."""
        return 8.0 * self.num_value_heads * self.key_head_dim * self.value_head_dim


@dataclass(frozen=True, slots=True)
class LayerKinds:
    """How many layers of each kind a model has, and their windows and widths."""

    full: int
    sliding: int = 0
    window: int = 0  # tokens a sliding layer attends to (0 when there are none)
    linear: int = 0
    linear_spec: LinearAttentionSpec | None = None

    def __post_init__(self) -> None:
        if min(self.full, self.sliding, self.linear) < 0:
            raise LayerKindsError("layer counts must be non-negative")
        if self.full < 1:
            raise LayerKindsError("a hybrid model needs at least one full-attention layer "
                                  "(its KV is what the block pool is sized by)")
        if self.sliding and self.window < 1:
            raise LayerKindsError("sliding-window layers need a positive window")
        if self.linear and self.linear_spec is None:
            raise LayerKindsError("linear-attention layers need their widths")

    @property
    def num_layers(self) -> int:
        return self.full + self.sliding + self.linear

    @property
    def is_hybrid(self) -> bool:
        return bool(self.sliding or self.linear)

    def describe(self) -> str:
        """"18 full + 18 sliding (window 128)", for `batchsim models`."""
        parts = [f"{self.full} full"]
        if self.sliding:
            parts.append(f"{self.sliding} sliding (window {self.window})")
        if self.linear:
            parts.append(f"{self.linear} linear")
        return " + ".join(parts)

    def state_elements_per_sequence(self) -> int:
        """Linear-attention state elements one sequence holds over the whole model."""
        if self.linear_spec is None:
            return 0
        return self.linear * self.linear_spec.state_elements()

    @classmethod
    def from_layer_types(cls, types: Sequence[str], *, window: int,
                         linear_spec: LinearAttentionSpec | None) -> LayerKinds:
        """Counts from a per-layer list of Hugging Face layer-type names."""
        unknown = sorted(set(types) - set(LAYER_TYPE_NAMES))
        if unknown:
            raise LayerKindsError(f"unknown layer type {unknown[0]!r}; expected one of "
                                  f"{', '.join(LAYER_TYPE_NAMES)}")
        sliding = sum(1 for kind in types if kind == SLIDING)
        linear = sum(1 for kind in types if kind == LINEAR)
        return cls(full=len(types) - sliding - linear, sliding=sliding,
                   window=window if sliding else 0, linear=linear,
                   linear_spec=linear_spec if linear else None)


def interval_layer_types(num_layers: int, interval: int, other: str) -> list[str]:
    """Every `interval`-th layer full attention, the rest `other` (Hugging Face's
    `full_attention_interval` and Gemma's `sliding_window_pattern` both mean this)."""
    return [FULL if (index + 1) % interval == 0 else other for index in range(num_layers)]


__all__ = ["FULL", "LINEAR", "SLIDING", "STATE_ELEMENT_BYTES", "LayerKinds", "LayerKindsError",
           "LinearAttentionSpec", "interval_layer_types"]
