"""Which efficiency keys each operator family fits, their allowed ranges and starting points.

The solver works on unbounded coordinates; each key's transform maps them into the range the
profile schema accepts (`batchsim.gpu.hardware`), so a fit can never write an impossible profile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

import numpy as np

from batchsim.gpu.hardware import ALLREDUCE_EXPONENT_RANGE, MAX_OVERLAP_POWER, RooflineEfficiency


class Bound(Enum):
    """How an unbounded coordinate x maps to a parameter value."""

    FRACTION = "fraction"  # (0, 1): sigmoid
    POSITIVE = "positive"  # (0, inf): exp
    POWER = "power"  # (1, MAX_OVERLAP_POWER)
    EXPONENT = "exponent"  # ALLREDUCE_EXPONENT_RANGE


@dataclass(frozen=True, slots=True)
class Parameter:
    """One fitted efficiency key and the starting values tried for it."""

    key: str
    bound: Bound
    starts: tuple[float, ...]  # cycled over the multi-start runs


def _p(key: str, bound: Bound, *starts: float) -> Parameter:
    return Parameter(key, bound, starts)


_GEMM = (
    _p("gemm_peak_efficiency", Bound.FRACTION, 0.8, 0.7, 0.9),
    _p("gemm_ramp_tokens", Bound.POSITIVE, 16.0, 64.0, 2.0),
    _p("memory_efficiency", Bound.FRACTION, 0.8, 0.7, 0.6),
    _p("kernel_launch_s", Bound.POSITIVE, 3e-6, 5e-6, 2e-6),
    _p("gemm_overlap_power", Bound.POWER, 2.0, 3.0, 1.5),
    _p("gemm_k_step_s", Bound.POSITIVE, 1.5e-9, 3e-9, 1e-9),
    _p("gemm_k_split", Bound.POSITIVE, 2048.0, 1024.0, 4096.0),
    _p("gemm_ramp_k", Bound.POSITIVE, 128.0, 64.0, 256.0),
    _p("gemm_wave_exponent", Bound.FRACTION, 0.5, 0.3, 0.15),
)

_QUANT = _p("gemm_quant_token_s", Bound.POSITIVE, 5e-9, 1e-8, 2e-9)
_MOE_PASSES = _p("moe_pair_passes", Bound.POSITIVE, 4.0, 1.0, 8.0)

FAMILY_PARAMETERS: Mapping[str, tuple[Parameter, ...]] = MappingProxyType(
    {
        "gemm": _GEMM,
        # A W8A8 GEMM runs other kernels than bf16 (every GEMM key its own), and a kernel
        # quantising its activations first.
        "gemm_fp8": (*_GEMM, _QUANT),
        # W4A4 NVFP4 likewise: its own kernels, and the activations quantised to FP4 first.
        "gemm_fp4": (*_GEMM, _QUANT),
        "decode_attention": (
            _p("attention_launch_s", Bound.POSITIVE, 1e-5, 5e-6, 2e-5),
            _p("decode_per_seq_head_s", Bound.POSITIVE, 2e-8, 5e-8, 1e-8),
            _p("kv_read_efficiency", Bound.FRACTION, 0.8, 0.6, 0.9),
            _p("decode_unsplit_fill", Bound.POSITIVE, 0.5, 0.1, 1.0),
            _p("decode_split_fill", Bound.POSITIVE, 0.05, 0.01, 0.2),
            _p("decode_overlap_fraction", Bound.FRACTION, 0.5, 0.2, 0.8),
            _p("decode_combine_s", Bound.POSITIVE, 5e-6, 2e-6, 1e-5),
            _p("decode_regroup_s", Bound.POSITIVE, 5e-6, 2e-6, 1e-5),
        ),
        "prefill_attention": (
            _p("attention_compute_efficiency", Bound.FRACTION, 0.6, 0.5, 0.7),
            _p("attention_ramp_tokens", Bound.POSITIVE, 8192.0, 1024.0, 32768.0),
            _p("prefill_memory_efficiency", Bound.FRACTION, 0.4, 0.2, 0.8),
            _p("attention_overlap_power", Bound.POWER, 1.2, 2.0, 1.05),
            _p("prefill_setup_s", Bound.POSITIVE, 1e-6, 3e-7, 3e-6),
        ),
        "allreduce": (
            _p("allreduce_latency_s", Bound.POSITIVE, 5e-6, 1e-5, 2e-6),
            _p("allreduce_latency_per_gpu_s", Bound.POSITIVE, 1.5e-6, 5e-7, 3e-6),
            _p("allreduce_bandwidth_efficiency", Bound.FRACTION, 0.5, 0.3, 0.8),
            _p("allreduce_scaling_exponent", Bound.EXPONENT, 0.0, 1.0, -0.2),
        ),
        # A fused-MoE kernel: grouped GEMMs with every GEMM key of their own, and the passes
        # over each routed pair's hidden row around them.
        "moe": (*_GEMM, _MOE_PASSES),
        "moe_fp8": (*_GEMM, _MOE_PASSES),
        "moe_fp4": (*_GEMM, _MOE_PASSES),
        "moe_mxfp4": (*_GEMM, _MOE_PASSES),
    }
)



@dataclass(frozen=True, slots=True)
class Switch:
    """A yes/no property of a family's kernels, which the fit decides by trying both."""

    key: str
    moot_when_on: tuple[str, ...]  # keys without effect when the switch is on: stored as 0


FAMILY_SWITCHES: Mapping[str, tuple[Switch, ...]] = MappingProxyType(
    {
        # Whether the decode kernel splits MHA sequences too; when it does, no layout is
        # unsplit and the unsplit occupancy has nothing to describe.
        "decode_attention": (Switch("decode_mha_split_kv", ("decode_unsplit_fill",)),),
    }
)

# The prefill fit reuses the decode fit's launch (one attention kernel serves both in a mixed
# step); it fits the launch itself only when no decode rows exist.
PREFILL_SHARED_LAUNCH = "attention_launch_s"


def to_value(bound: Bound, x: np.ndarray) -> np.ndarray:
    """Parameter values of unbounded coordinates `x`."""
    if bound is Bound.FRACTION:
        return _sigmoid(x)
    if bound is Bound.POSITIVE:
        return np.exp(np.clip(x, -700.0, 700.0))
    if bound is Bound.POWER:
        return 1.0 + (MAX_OVERLAP_POWER - 1.0) * _sigmoid(x)
    low, high = ALLREDUCE_EXPONENT_RANGE
    return low + (high - low) * _sigmoid(x)


def to_coordinate(bound: Bound, value: float) -> float:
    """Inverse of `to_value` (values are clipped just inside their open range)."""
    if bound is Bound.POSITIVE:
        return float(np.log(max(value, 1e-300)))
    if bound is Bound.FRACTION:
        unit = value
    elif bound is Bound.POWER:
        unit = (value - 1.0) / (MAX_OVERLAP_POWER - 1.0)
    else:
        low, high = ALLREDUCE_EXPONENT_RANGE
        unit = (value - low) / (high - low)
    unit = min(max(unit, 1e-9), 1.0 - 1e-9)
    return float(np.log(unit / (1.0 - unit)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -700.0, 700.0)))


def round_significant(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits: what a profile stores, so what is scored.

    Values below 1e-30 (a ramp the fit drove to nothing) are stored, and scored, as 0.
    """
    return 0.0 if abs(value) < 1e-30 else float(f"{value:.{digits - 1}e}")


FAMILY_WEIGHTS: Mapping[str, str] = MappingProxyType({"gemm_fp8": "fp8", "gemm_fp4": "nvfp4"})
"""Families whose keys are a weight dtype's own GEMM keys (`gemm_by_weights`), not the
profile's top-level ones."""
FAMILY_MOE_WEIGHTS: Mapping[str, str] = MappingProxyType(
    {"moe": "bf16", "moe_fp8": "fp8", "moe_fp4": "nvfp4", "moe_mxfp4": "mxfp4"})
"""Families whose keys are a weight dtype's fused-MoE keys (`moe_by_weights`)."""


def with_values(eff: RooflineEfficiency, values: Mapping[str, float]) -> RooflineEfficiency:
    """`eff` with some numeric keys replaced."""
    fields: dict[str, Any] = dict(values)
    return dataclasses.replace(eff, **fields)


def with_family_values(
    eff: RooflineEfficiency, family: str, values: Mapping[str, float]
) -> RooflineEfficiency:
    """`eff` with `family`'s keys replaced where that family keeps them."""
    if family in FAMILY_MOE_WEIGHTS:
        return eff.with_moe_for(FAMILY_MOE_WEIGHTS[family], values)
    weights = FAMILY_WEIGHTS.get(family)
    if weights is None:
        return with_values(eff, values)
    return eff.with_gemm_for(weights, values)
