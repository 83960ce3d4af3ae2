"""FP4 weights (NVFP4, MXFP4): their bytes with the block scales, the rate and GEMM keys they
run at, with and without FP4 tensor cores and fitted nvfp4 keys (docs/background/model.md,
"Quantisation")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import DtypeError, bytes_per_element, check_weight_dtype
from batchsim.gpu.hardware import GpuProfile, RooflineEfficiency, load_gpu_profile
from batchsim.gpu.memory import weights_bytes_per_gpu
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.roofline import gemm_seconds

# Llama-3.1-8B on one GPU: the four layer GEMMs (N, K) and the layer count.
_LLAMA_GEMMS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
_LLAMA_LAYERS = 32


def test_bytes_per_element_count_the_block_scales() -> None:
    # NVFP4: 4 bits plus an 8-bit E4M3 scale per 16 values = 4.5 bits; MXFP4: an 8-bit E8M0
    # scale per 32 values = 4.25 bits.
    assert bytes_per_element("nvfp4") == 4.5 / 8
    assert bytes_per_element("mxfp4") == 4.25 / 8
    assert check_weight_dtype("nvfp4") == "nvfp4"
    with pytest.raises(DtypeError, match="'fp4' is not supported"):
        check_weight_dtype("fp4")


@pytest.mark.parametrize("dtype", ["nvfp4", "mxfp4"])
def test_fp4_computes_at_the_fp4_peak_where_the_gpu_has_fp4_cores(dtype: str) -> None:
    gb300, h100 = load_gpu_profile("gb300"), load_gpu_profile("h100")
    assert gb300.peak_flops.for_weights(dtype) == 15e15  # GB300 NVL72: 1,080 PFLOPS dense / 72
    assert gb300.peak_flops.gemm_keys_for(dtype, gb300.efficiency.gemm_by_weights) == "nvfp4"
    # A Blackwell profile with no nvfp4 keys of its own borrows fp8's.
    assert _without_nvfp4_keys(gb300).peak_flops.gemm_keys_for(
        dtype, _without_nvfp4_keys(gb300).efficiency.gemm_by_weights) == "fp8"
    # Hopper has no FP4 cores: dequantised in the kernel and multiplied in bf16, as int4.
    assert h100.peak_flops.fp4 is None
    assert h100.peak_flops.for_weights(dtype) == 989e12
    assert h100.peak_flops.gemm_keys_for(dtype, {"bf16", "fp8"}) == "bf16"
    # Keys fitted for these very weights (on this GPU's kernels) are used whatever the cores.
    assert h100.peak_flops.gemm_keys_for(dtype, {dtype}) == dtype
    assert h100.peak_flops.gemm_keys_for("fp8", ()) == "fp8"  # other dtypes keep their own keys


@pytest.mark.parametrize("dtype", ["nvfp4", "mxfp4"])
def test_fp4_gemms_on_the_b200_use_its_fitted_nvfp4_keys(dtype: str) -> None:
    b200 = load_gpu_profile("b200")
    eff = b200.efficiency
    assert b200.peak_flops.gemm_keys_for(dtype, eff.gemm_by_weights) == "nvfp4"
    # Its FP4 fused-MoE tables are fitted too: routed experts use their own MoE keys
    # (tests/calibration/test_fp4_moe_families.py).
    assert b200.peak_flops.gemm_keys_for(dtype, eff.moe_by_weights) == dtype
    # The fitted FP4 kernel is not the fp8 one: a step priced with fp8's keys would differ.
    nvfp4, fp8 = eff.gemm_by_weights["nvfp4"], eff.gemm_by_weights["fp8"]
    assert nvfp4["gemm_peak_efficiency"] != fp8["gemm_peak_efficiency"]


def test_weights_of_an_nvfp4_model_on_a_b300() -> None:
    # 32 layers of 218,103,808 weights at 0.5625 bytes, the embedding and LM head (2 x 128,256
    # x 4,096) and 65 norms of 4,096 in bf16.
    quantised = 32 * 218_103_808 * 0.5625
    bf16 = (2 * 128_256 * 4_096 + 65 * 4_096) * 2
    weights = weights_bytes_per_gpu(load_model("llama-3.1-8b"), 1, "nvfp4")
    assert weights == round(quantised + bf16) == 6_027_747_328


def _layer_gemms_s(tokens: int, *, peak: float, weight_bytes: float, gpu: GpuProfile,
                   eff: RooflineEfficiency) -> float:
    seconds = [gemm_seconds(float(tokens), n, k, peak_flops=peak,
                            memory_bw=gpu.memory_bandwidth_bytes_per_s, weight_bytes=weight_bytes,
                            sm_count=gpu.parallel_units, eff=eff) for n, k in _LLAMA_GEMMS]
    return _LLAMA_LAYERS * float(sum(seconds))


def _without_nvfp4_keys(gpu: GpuProfile) -> GpuProfile:
    """`gpu` as if its nvfp4 GEMM tables had not been fitted (a spec-only Blackwell profile)."""
    own = {k: v for k, v in gpu.efficiency.gemm_by_weights.items() if k != "nvfp4"}
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency,
                                                                    gemm_by_weights=own))


def _linear_s(gpu: GpuProfile, weights: str, tokens: int) -> float:
    model = RooflineCostModel(load_model("llama-3.1-8b"), gpu, tensor_parallel=1,
                              weight_dtype=weights, kv_dtype="bf16")
    return model.step_time(np.array([tokens]), np.array([0]), 1).linear_s


@pytest.mark.parametrize(
    ("gpu_name", "dtype", "peak", "keys"),
    [("b200", "nvfp4", 9e15, "nvfp4"),  # FP4 tensor cores and the fitted nvfp4 GEMM keys
     ("b200", "mxfp4", 9e15, "nvfp4"),  # mxfp4 is unmeasured: nvfp4's keys, its own bytes
     ("b300", "nvfp4", 13.5e15, "nvfp4"),  # the B300's own fitted nvfp4 keys
     ("gb300", "nvfp4", 15e15, "nvfp4"),  # the GB300's
     ("gb300-unfitted", "nvfp4", 15e15, "fp8"),  # FP4 cores, no nvfp4 keys of its own: fp8's
     ("h100", "nvfp4", 989e12, "bf16")],  # none: the bf16 rate and bf16 keys, weight-only
)
def test_a_step_prices_fp4_layer_gemms(gpu_name: str, dtype: str, peak: float,
                                       keys: str) -> None:
    gpu = load_gpu_profile(gpu_name.removesuffix("-unfitted"))
    if gpu_name.endswith("-unfitted"):
        gpu = _without_nvfp4_keys(gpu)
    eff = gpu.efficiency.gemm_by_weights.get(keys)
    fp4_eff = dataclasses.replace(gpu.efficiency, **eff) if eff else gpu.efficiency
    tokens = 2048
    # The LM head is bf16 in both, so the difference is the layer GEMMs' alone.
    expected = (
        _layer_gemms_s(tokens, peak=peak, weight_bytes=bytes_per_element(dtype), gpu=gpu,
                       eff=fp4_eff)
        - _layer_gemms_s(tokens, peak=gpu.peak_flops.bf16, weight_bytes=2.0, gpu=gpu,
                         eff=gpu.efficiency)
    )
    got = _linear_s(gpu, dtype, tokens) - _linear_s(gpu, "bf16", tokens)
    assert got == pytest.approx(expected, rel=1e-9)


def test_a_profile_with_fp4_cores_but_no_fp8_keys_uses_the_bf16_keys() -> None:
    l40s = load_gpu_profile("l40s")  # no fp8 GEMM keys of its own
    fp4 = dataclasses.replace(l40s, peak_flops=dataclasses.replace(l40s.peak_flops, fp4=2e15))
    keys = fp4.peak_flops.gemm_keys_for("mxfp4", fp4.efficiency.gemm_by_weights)
    assert fp4.efficiency.for_weights(keys) is fp4.efficiency
