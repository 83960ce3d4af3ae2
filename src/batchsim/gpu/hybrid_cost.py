"""Attention cost of a hybrid model's sliding-window and linear-attention layers
(docs/design.md §3, hybrid attention).

The full-attention layers are priced by the cost model as every layer of a plain model is.
This module adds the rest, per step:

- sliding-window layers run the same kernels over at most `window` cached tokens: a decode
  reads min(context + 1, window) tokens of KV; a prefill chunk of q new tokens on c cached
  ones is priced as attending to min(c, window) cached tokens and min(q, window) of its own;
- linear-attention layers read and write each sequence's fixed state once per step (O(1) in
  the context) and do the recurrence's FLOPs per new token, whichever takes longer (the
  roofline of a memory-bound and a compute-bound term), plus one kernel launch.

Decode stretches (the fast path) are priced step by step with the same functions, so a
stretch's durations equal single steps' bit for bit (tests/sim/test_hybrid_attention.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from batchsim.gpu.hardware import RooflineEfficiency

DecodePerLayer = Callable[[float, int], float]
DecodePerLayerSteps = Callable[[np.ndarray, int], np.ndarray]
PrefillPerLayer = Callable[[float, float, float, float], float]


class WindowSums(NamedTuple):
    """A step's sums as its sliding-window layers see them."""

    new: int  # Σ q over the prefill sequences (q > 1)
    context: int  # Σ min(c, window)
    new_times_context: int  # Σ q · min(c, window)
    new_squared: int  # Σ q · min(q, window)
    num_prefills: int
    decode_kv: int  # Σ min(c + 1, window) over the decode sequences (q == 1)
    num_decodes: int


def window_sums(new_tokens: list[int], context_tokens: list[int], window: int) -> WindowSums:
    """`WindowSums` of one step, in exact integers."""
    new = context = new_times_context = new_squared = prefills = decode_kv = decodes = 0
    for q, c in zip(new_tokens, context_tokens, strict=True):
        if q > 1:
            seen = min(c, window)
            new += q
            context += seen
            new_times_context += q * seen
            new_squared += q * min(q, window)
            prefills += 1
        else:
            decode_kv += min(c + 1, window)
            decodes += 1
    return WindowSums(new, context, new_times_context, new_squared, prefills, decode_kv, decodes)


@dataclass(frozen=True, slots=True)
class HybridAttentionCost:
    """The sliding-window and linear-attention layers of one GPU's share of a hybrid model."""

    sliding_layers: float
    window: int
    linear_layers: float
    state_bytes_per_layer: float  # one sequence's state in one layer, on this GPU
    linear_flops_per_token: float  # one token's recurrence in one layer, on this GPU
    launch_s: float
    memory_bw: float
    peak_flops: float
    eff: RooflineEfficiency

    def step_s(self, new_tokens: list[int], context_tokens: list[int],
               decode_per_layer: DecodePerLayer, prefill_per_layer: PrefillPerLayer) -> float:
        """Seconds of these layers in one step; `decode_per_layer` and `prefill_per_layer` are
        the cost model's per-layer attention (the full layers' kernels)."""
        total_new = sum(new_tokens)
        seconds = self.linear_s(len(new_tokens), total_new)
        if not self.sliding_layers:
            return seconds
        sums = window_sums(new_tokens, context_tokens, self.window)
        if not sums.num_prefills:  # a decode step: the form `decode_steps_s` prices
            per_layer = decode_per_layer(float(sums.decode_kv), sums.num_decodes)
        else:
            per_layer = prefill_per_layer(float(sums.new), float(sums.context),
                                          float(sums.new_times_context),
                                          float(sums.new_squared))
            if sums.num_decodes:
                per_layer += decode_per_layer(float(sums.decode_kv), sums.num_decodes)
        return self.sliding_layers * (self.launch_s + per_layer) + seconds

    def decode_steps_s(self, context_tokens: list[int], num_steps: int,
                       decode_per_layer: DecodePerLayerSteps) -> np.ndarray:
        """`step_s` of `num_steps` consecutive decode steps of one batch, step j with every
        context grown by j: element for element the same numbers."""
        num_seqs = len(context_tokens)
        seconds = np.full(num_steps, self.linear_s(num_seqs, num_seqs))
        if not self.sliding_layers:
            return seconds
        first = np.asarray(context_tokens, dtype=np.int64) + 1
        steps = np.arange(num_steps, dtype=np.int64)
        kv = np.minimum(first[None, :] + steps[:, None], self.window).sum(axis=1)
        per_layer = decode_per_layer(kv.astype(np.float64), num_seqs)
        return self.sliding_layers * (self.launch_s + per_layer) + seconds

    def linear_s(self, num_seqs: int, total_new: int) -> float:
        """The linear-attention layers: state traffic or recurrence FLOPs, plus a launch."""
        if not self.linear_layers:
            return 0.0
        traffic_s = 2.0 * num_seqs * self.state_bytes_per_layer / (
            self.memory_bw * self.eff.kv_read_efficiency)
        compute_s = total_new * self.linear_flops_per_token / (
            self.peak_flops * self.eff.attention_compute_efficiency)
        return self.linear_layers * (self.launch_s + max(traffic_s, compute_s))


__all__ = ["HybridAttentionCost", "WindowSums", "window_sums"]
