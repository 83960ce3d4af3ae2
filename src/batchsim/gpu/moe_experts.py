"""The fused-MoE expert kernel on one GPU: the price of routed experts that the cost model
(`gpu.moe_cost`) and the calibration fit share.

T tokens each choose k of E experts; the GPU holds E / EP of them, each split over TP / EP
GPUs (width w), and the busiest GPU's experts are picked `load` times as often as the mean. For
the (token, expert) pairs it routes the kernel:

- moves each pair's hidden row: gathered in front of its expert's GEMM, quantised where the
  weights are fp8, and summed back weighted; `moe_pair_passes` counts those passes over a
  row of bf16 activations (0 where the profile has no fitted MoE keys). Where every GPU holds
  every token (tensor-parallel attention) it routes all T·k picks, the non-local ones masked,
  as vLLM's fused MoE does under expert parallelism; where an all-to-all dispatched the tokens
  (data-parallel attention), only its own pairs;
- runs the grouped GEMMs of the n distinct local experts touched, priced as one GEMM of their
  matrices side by side (N = n × the expert's width, M = local pairs / n tokens each) by
  `roofline.gemm_seconds`: the FLOPs are exact, the weights streamed are those of the touched
  experts only, the waves count every expert's tiles, and the kernel launches and walks its K
  loop once, as a grouped-GEMM kernel does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from batchsim.gpu.dtypes import ACTIVATION_BYTES
from batchsim.gpu.hardware import RooflineEfficiency
from batchsim.gpu.roofline import gemm_parts, gemm_seconds

Real = Any  # a float or a numpy array, as in gpu.roofline


@dataclass(frozen=True, slots=True)
class ExpertLoad:
    """What one GPU's expert kernel serves at one token count (arrays or floats)."""

    touched: Real  # distinct local experts picked at least once
    pairs: Real  # local (token, expert) pairs
    routed: Real  # (token, expert) pairs the kernel routes: local ones, or every token's k

    @property
    def tokens_per_expert(self) -> Real:
        return self.pairs / self.touched


@dataclass(frozen=True, slots=True)
class ExpertShape:
    """One MoE layer's routed experts on one GPU."""

    num_experts: Real  # E, all routed experts of the layer
    top_k: Real
    expert_parallel: Real  # EP: the GPU holds E / EP experts
    hidden: Real
    width: Real  # one expert's intermediate width on this GPU (w / (TP / EP))


def expert_load(tokens: Real, shape: ExpertShape, load: float = 1.0, *,
                dispatched: bool = False) -> ExpertLoad:
    """Expected load of the busiest GPU's experts: a token picks a given expert with chance
    p = load·k/E (at most 1), so `tokens` touch (E/EP)·(1−(1−p)^T) of them with
    T·(E/EP)·p pairs between them. `dispatched`: an all-to-all brought the GPU only its own
    pairs; otherwise it holds every token and routes all T·k picks."""
    p = np.minimum(1.0, load * shape.top_k / shape.num_experts)
    local = shape.num_experts / shape.expert_parallel
    touched = local * (1.0 - (1.0 - p) ** tokens)
    pairs = tokens * local * p
    return ExpertLoad(touched, pairs, pairs if dispatched else tokens * shape.top_k)


def routed_expert_parts(
    load: ExpertLoad,
    shape: ExpertShape,
    *,
    peak_flops: float,
    memory_bw: float,
    weight_bytes: float,
    sm_count: float,
    eff: RooflineEfficiency,
) -> tuple[Real, Real, Real]:
    """(seconds, compute seconds, memory seconds) of one layer's expert kernel.

    `eff`: the MoE keys of the weights (`RooflineEfficiency.for_moe`). Compute and memory are
    the grouped GEMMs' parts before overlap (they say whether the step is compute-bound).
    """
    m, n, h, w = load.tokens_per_expert, load.touched, shape.hidden, shape.width
    seconds, compute, memory = 0.0, 0.0, 0.0
    for width, depth in ((n * 2.0 * w, h), (n * h, w)):  # gate and up side by side; down
        args = (m, width, depth)
        kwargs = {"peak_flops": peak_flops, "memory_bw": memory_bw,
                  "weight_bytes": weight_bytes, "sm_count": sm_count}
        seconds = seconds + gemm_seconds(*args, **kwargs, eff=eff)
        compute_s, memory_s = gemm_parts(*args, **kwargs, eff=eff)
        compute, memory = compute + compute_s, memory + memory_s
    seconds = seconds + routing_seconds(load, shape, memory_bw=memory_bw, eff=eff)
    return seconds, compute, memory


def routing_seconds(load: ExpertLoad, shape: ExpertShape, *, memory_bw: float,
                    eff: RooflineEfficiency) -> Real:
    """What the kernel adds to its GEMMs: moving the hidden row of every pair it routes at the
    GEMMs' memory efficiency (0 without fitted MoE keys)."""
    pair_bytes = eff.moe_pair_passes * shape.hidden * ACTIVATION_BYTES
    return load.routed * pair_bytes / (memory_bw * eff.memory_efficiency)


__all__ = ["ExpertLoad", "ExpertShape", "expert_load", "routed_expert_parts", "routing_seconds"]
