"""The mixture-of-experts part of a model: how many experts, how many each token uses, how wide.

A MoE layer replaces the dense MLP with a router (one h × E matrix), `num_experts` routed
experts of which each token uses `experts_per_token` (top-k), and optionally shared experts
that every token always passes through. Each expert is a gated (SwiGLU) MLP of three matrices,
like the dense MLP. The first `first_dense_layers` layers keep a dense MLP (DeepSeek-V3's
`first_k_dense_replace`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

Tokens = TypeVar("Tokens", float, np.ndarray)


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Routing and widths of a model's mixture-of-experts layers."""

    num_experts: int  # routed experts per MoE layer
    experts_per_token: int  # top-k
    expert_intermediate_size: int  # width of one routed expert's MLP
    num_shared_experts: int = 0  # experts every token passes through
    shared_expert_intermediate_size: int = 0  # width of one shared expert's MLP
    first_dense_layers: int = 0  # leading layers that keep a dense MLP

    def routed_expert_params(self, hidden_size: int) -> int:
        """Gate, up and down matrices of one routed expert."""
        return 3 * hidden_size * self.expert_intermediate_size

    def shared_width(self) -> int:
        """Width of all shared experts together (they run as one dense MLP)."""
        return self.num_shared_experts * self.shared_expert_intermediate_size

    def layer_params(self, hidden_size: int, *, active: bool) -> int:
        """Parameters of one MoE block: router, routed experts (all, or the k a token uses)
        and shared experts."""
        h = hidden_size
        routed = self.experts_per_token if active else self.num_experts
        router = h * self.num_experts
        shared = 3 * h * self.shared_width()
        return router + routed * self.routed_expert_params(h) + shared

    def expected_experts_touched(self, num_tokens: Tokens, *, load: float = 1.0) -> Tokens:
        """Expected distinct experts that `num_tokens` tokens choose, k of E each: E·(1−(1−p)^T).

        `load` scales the chance p = k/E that one token picks a given expert (the busiest GPU's
        experts are picked `load` times as often as the mean); p is capped at 1.
        """
        return self.num_experts * (1.0 - (1.0 - self.pick_probability(load)) ** num_tokens)

    def pick_probability(self, load: float = 1.0) -> float:
        """Chance one token picks a given expert: k/E, times `load`, at most 1."""
        return min(1.0, load * self.experts_per_token / self.num_experts)


__all__ = ["MoESpec"]
