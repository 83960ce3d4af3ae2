"""Numeric formats of weights and KV cache: their size, and which tensor-core rate they run at.

Quantisation changes two things in the cost model: the bytes streamed from memory (weights and
KV cache) and, for weights, the peak FLOP/s of the GEMMs. This module is the one place that
knows both, so that the memory plan and the roofline cost model cannot disagree.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Final, Literal

# Block-scaled 4-bit floats store each block's shared scale beside its 4-bit E2M1 values, so
# the scale is part of every element's bytes (docs/background/model.md, "Quantisation"):
# NVFP4, one FP8 E4M3 scale per 16 values (the per-tensor FP32 scale is 4 bytes a tensor);
# MXFP4 (OCP Microscaling v1.0), one E8M0 scale per 32 values.
NVFP4_BYTES: Final[float] = 0.5 + 1.0 / 16
MXFP4_BYTES: Final[float] = 0.5 + 1.0 / 32

BYTES_PER_ELEMENT: Final[Mapping[str, float]] = MappingProxyType(
    {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
     "nvfp4": NVFP4_BYTES, "mxfp4": MXFP4_BYTES}
)
"""Storage size of one element. int4 packs two weights per byte (scales are ignored: <1%)."""

FP4_WEIGHT_DTYPES: Final[frozenset[str]] = frozenset({"nvfp4", "mxfp4"})
WEIGHT_DTYPES: Final[frozenset[str]] = (
    frozenset({"bf16", "fp8", "int8", "int4"}) | FP4_WEIGHT_DTYPES
)
# An NVFP4 KV cache (TensorRT-LLM's `kv_cache_config.dtype: nvfp4`, SGLang's FP4 KV) is read
# by Blackwell attention kernels only: a GPU without FP4 tensor cores is refused.
FP4_KV_DTYPES: Final[frozenset[str]] = frozenset({"nvfp4"})
KV_DTYPES: Final[frozenset[str]] = frozenset({"bf16", "fp8", "int8"}) | FP4_KV_DTYPES

ACTIVATION_BYTES: Final[float] = 2.0
"""Activations (GEMM inputs/outputs, all-reduce payloads) stay in bf16 whatever the weights are."""

PeakFlopsKey = Literal["bf16", "fp8", "int8", "fp4"]

COMPUTE_RATE_OF_WEIGHTS: Final[Mapping[str, PeakFlopsKey]] = MappingProxyType(
    {
        "bf16": "bf16",
        # W8A8 fp8 runs on fp8 tensor cores where the GPU has them; a profile without an fp8
        # peak (A100) falls back to bf16 — vLLM runs fp8 there as weight-only (Marlin), which
        # still halves the bytes streamed but computes in bf16.
        "fp8": "fp8",
        # W8A8 int8 (SmoothQuant-style, as vLLM's compressed-tensors int8 path) uses int8 cores.
        "int8": "int8",
        # W4A16 (AWQ/GPTQ): weights are dequantised inside the kernel and multiplied in bf16.
        "int4": "bf16",
        # W4A4 on FP4 tensor cores (Blackwell); a profile without an fp4 peak (Hopper, Ampere,
        # Ada) runs them weight-only, dequantised and multiplied at the bf16 rate, like int4.
        "nvfp4": "fp4",
        "mxfp4": "fp4",
    }
)
"""Which peak FLOP/s entry of a GPU profile a GEMM with these weights computes at."""


FITTED_FP4_KEYS: Final[str] = "nvfp4"
"""The one FP4 format with GEMM tables to fit (the public ones hold no mxfp4 GEMM rows; their
fused-MoE tables have both formats)."""


def gemm_kernel_dtype(weight_dtype: str, *, fp4_cores: bool, own_keys: Collection[str]) -> str:
    """The weight dtype whose GEMM efficiency keys price GEMMs with `weight_dtype` weights.

    `own_keys`: the weight dtypes with keys of their own in the block about to be read. FP4
    weights with keys of their own there use them (fitted on the kernel this GPU runs them
    with: the fused-MoE tables time nvfp4 and weight-only mxfp4 experts). Otherwise, on FP4
    tensor cores, FP4 GEMMs use nvfp4's keys where they are fitted — mxfp4 too, unmeasured:
    the same E2M1 tensor-core path, with coarser scales — else fp8's (the nearest kernels:
    low-precision weights, activations quantised first; a profile without fp8 keys falls back
    to bf16's). Without FP4 cores they run weight-only with bf16's, as int4.
    """
    if weight_dtype not in FP4_WEIGHT_DTYPES or weight_dtype in own_keys:
        return weight_dtype
    if not fp4_cores:
        return "bf16"
    return FITTED_FP4_KEYS if FITTED_FP4_KEYS in own_keys else "fp8"


class DtypeError(ValueError):
    """An unknown or unsupported numeric format."""


def bytes_per_element(dtype: str) -> float:
    """Bytes of one element stored in `dtype` (any known format)."""
    try:
        return BYTES_PER_ELEMENT[dtype]
    except KeyError:
        known = ", ".join(sorted(BYTES_PER_ELEMENT))
        raise DtypeError(f"unknown dtype {dtype!r}; expected one of {known}") from None


def check_weight_dtype(dtype: str) -> str:
    """Return `dtype` if weights may be stored in it, else raise DtypeError."""
    if dtype not in WEIGHT_DTYPES:
        known = ", ".join(sorted(WEIGHT_DTYPES))
        raise DtypeError(f"weight dtype {dtype!r} is not supported; expected one of {known}")
    return dtype


def check_expert_dtype(dtype: str | None, *, model_name: str, routed_experts: bool) -> str | None:
    """Return `dtype`, the routed experts' own weight format (None: the other weights'), if
    the experts may be stored in it and the model has routed experts, else raise DtypeError."""
    if dtype is None:
        return None
    check_weight_dtype(dtype)
    if not routed_experts:
        raise DtypeError(f"{model_name} has no routed experts: an expert weight format applies "
                         "to mixture-of-experts models only")
    return dtype


def check_kv_dtype(dtype: str) -> str:
    """Return `dtype` if the KV cache may be stored in it, else raise DtypeError."""
    if dtype not in KV_DTYPES:
        known = ", ".join(sorted(KV_DTYPES))
        raise DtypeError(f"KV-cache dtype {dtype!r} is not supported; expected one of {known}")
    return dtype


def check_kv_dtype_on(dtype: str, *, gpu_name: str, fp4_cores: bool) -> str:
    """`check_kv_dtype`, and an FP4 KV cache only on a GPU with FP4 tensor cores."""
    check_kv_dtype(dtype)
    if dtype in FP4_KV_DTYPES and not fp4_cores:
        raise DtypeError(f"an {dtype} KV cache needs FP4 tensor cores (a Blackwell GPU, whose "
                         f"profile gives peak_flops.fp4); {gpu_name} has none: use fp8")
    return dtype
