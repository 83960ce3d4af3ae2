"""The fit recovers known efficiencies from measurements the model itself generated."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from batchsim.calibration.fit import fit_profile
from batchsim.calibration.parameters import FAMILY_PARAMETERS
from batchsim.gpu.hardware import GEMM_KEYS, SM_TERMS, GpuProfile, load_gpu_profile
from tests.calibration.synthetic import synthetic_tables

# A truth unlike every starting point of the fit, with every term switched on.
_TRUTH = {
    "gemm_peak_efficiency": 0.83, "gemm_ramp_tokens": 24.0, "memory_efficiency": 0.74,
    "kernel_launch_s": 3.3e-6, "gemm_overlap_power": 2.6, "gemm_k_step_s": 2.2e-9,
    "gemm_k_split": 1500.0, "attention_launch_s": 1.3e-5, "decode_per_seq_head_s": 3.1e-8,
    "kv_read_efficiency": 0.87, "attention_compute_efficiency": 0.55,
    "attention_ramp_tokens": 5000.0, "prefill_memory_efficiency": 0.45,
    "attention_overlap_power": 1.4, "allreduce_latency_s": 7e-6,
    "allreduce_latency_per_gpu_s": 1.1e-6, "allreduce_bandwidth_efficiency": 0.62,
    "allreduce_scaling_exponent": 0.7, "gemm_ramp_k": 110.0, "gemm_wave_exponent": 0.4,
    "decode_unsplit_fill": 0.45, "decode_split_fill": 0.03, "decode_overlap_fraction": 0.35,
    "decode_combine_s": 4e-6, "decode_regroup_s": 3e-6, "prefill_setup_s": 1.5e-6,
}


def _truth_gpu(**switches: bool) -> GpuProfile:
    gpu = load_gpu_profile("h100-sxm")
    truth = {**_TRUTH, "decode_mha_split_kv": False, **switches}
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, **truth))


def test_noise_free_measurements_give_back_the_parameters() -> None:
    truth = _truth_gpu()
    fitted = fit_profile(truth, synthetic_tables(truth, noise=0.0, seed=1), seed=3).gpu
    for key, value in _TRUTH.items():
        assert getattr(fitted.efficiency, key) == pytest.approx(value, rel=0.02), key
    assert fitted.calibration is not None
    for error in fitted.calibration.heldout_error.values():
        assert error.p90_ape < 0.01


def test_noisy_measurements_give_back_the_parameters_up_to_the_noise() -> None:
    truth = _truth_gpu()
    result = fit_profile(truth, synthetic_tables(truth, noise=0.03, seed=2), seed=0)
    # The well-determined keys of each family: efficiencies and launch constants.
    for key in ("gemm_peak_efficiency", "memory_efficiency", "kernel_launch_s",
                "kv_read_efficiency", "attention_launch_s", "decode_per_seq_head_s",
                "attention_compute_efficiency", "allreduce_bandwidth_efficiency"):
        assert getattr(result.gpu.efficiency, key) == pytest.approx(_TRUTH[key], rel=0.1), key
    for fit in result.families.values():
        # Held-out error is the noise itself: median |lognormal(0, 3%) - 1| ≈ 2% (the all-reduce
        # grid holds out only 7 rows, hence the margin).
        assert fit.heldout.median_ape < 0.05


def test_every_family_fits_only_its_own_keys() -> None:
    truth = _truth_gpu()
    tables = synthetic_tables(truth, noise=0.0, seed=1)
    result = fit_profile(truth, {"gemm": tables["gemm"]}, seed=0)
    assert set(result.families["gemm"].values) == {p.key for p in FAMILY_PARAMETERS["gemm"]}
    assert result.gpu.efficiency.kv_read_efficiency == truth.efficiency.kv_read_efficiency
    assert result.gpu.calibration is not None
    assert "kv_read_efficiency" in result.gpu.calibration.not_fitted


@pytest.mark.parametrize("splits_mha", [False, True])
def test_the_fit_tells_whether_the_decode_kernel_splits_mha_sequences(splits_mha: bool) -> None:
    truth = _truth_gpu(decode_mha_split_kv=splits_mha)
    tables = synthetic_tables(truth, noise=0.02, seed=4)
    fitted = fit_profile(truth, {"decode_attention": tables["decode_attention"]}, seed=0).gpu
    assert fitted.efficiency.decode_mha_split_kv is splits_mha
    if splits_mha:  # no layout is unsplit: its occupancy is moot, stored as 0
        assert fitted.efficiency.decode_unsplit_fill == 0.0
    else:
        assert fitted.efficiency.decode_unsplit_fill == pytest.approx(0.45, rel=0.1)


def test_without_an_sm_count_the_wave_and_occupancy_terms_stay_off() -> None:
    off = dict.fromkeys(SM_TERMS, 0.0)
    truth = dataclasses.replace(_truth_gpu(**off), sm_count=None)
    tables = synthetic_tables(truth, noise=0.0, seed=1)
    result = fit_profile(truth, {f: tables[f] for f in ("gemm", "decode_attention")}, seed=0)
    assert result.gpu.calibration is not None
    for key in SM_TERMS:
        assert getattr(result.gpu.efficiency, key) == 0.0
        assert key in result.gpu.calibration.not_fitted
    # Still told apart: a split MHA decode would run a combine kernel.
    assert result.gpu.efficiency.decode_mha_split_kv is False
    assert result.families["gemm"].heldout.p90_ape < 0.01


# fp8 (and nvfp4) GEMMs unlike the bf16 truth in every key, with an activation-quantisation
# kernel.
_FP8_TRUTH = {
    "gemm_peak_efficiency": 0.66, "gemm_ramp_tokens": 9.0, "memory_efficiency": 0.69,
    "kernel_launch_s": 3.9e-6, "gemm_overlap_power": 1.7, "gemm_k_step_s": 1.1e-9,
    "gemm_k_split": 3000.0, "gemm_ramp_k": 60.0, "gemm_wave_exponent": 0.6,
    "gemm_quant_token_s": 7e-9,
}


@pytest.mark.parametrize(("family", "dtype"), [("gemm_fp8", "fp8"), ("gemm_fp4", "nvfp4")])
def test_quantised_gemms_get_keys_of_their_own_and_leave_the_bf16_ones_alone(
    family: str, dtype: str
) -> None:
    bf16_only = _truth_gpu()
    truth = dataclasses.replace(
        bf16_only, efficiency=bf16_only.efficiency.with_gemm_for(dtype, _FP8_TRUTH))
    tables = synthetic_tables(truth, noise=0.0, seed=5, families=(family,))
    result = fit_profile(bf16_only, tables, seed=0)
    fitted = result.gpu.efficiency
    # Other dtypes' keys (the H100's fitted fp8 ones, for nvfp4) are left as they were.
    others = {d: keys for d, keys in bf16_only.efficiency.gemm_by_weights.items() if d != dtype}
    assert set(fitted.gemm_by_weights) == {*others, dtype}
    assert all(fitted.gemm_by_weights[d] == keys for d, keys in others.items())
    for key, value in _FP8_TRUTH.items():
        assert fitted.gemm_by_weights[dtype][key] == pytest.approx(value, rel=0.02), key
    for key in GEMM_KEYS:  # the bf16 GEMMs' keys are the spec's, untouched
        assert getattr(fitted, key) == getattr(bf16_only.efficiency, key), key
    assert result.families[family].heldout.p90_ape < 0.01
    assert result.gpu.calibration is not None
    assert result.gpu.calibration.sources[0].family == family


# A fused-MoE kernel unlike both the dense bf16 truth and every starting point.
_MOE_TRUTH = {
    "gemm_peak_efficiency": 0.61, "gemm_ramp_tokens": 30.0, "memory_efficiency": 0.86,
    "kernel_launch_s": 1.9e-5, "moe_pair_passes": 5.5,
}


@pytest.mark.parametrize(("family", "dtype"), [("moe", "bf16"), ("moe_fp8", "fp8")])
def test_moe_kernels_get_keys_of_their_own_and_leave_the_gemm_ones_alone(
    family: str, dtype: str
) -> None:
    shipped = _truth_gpu()
    dense = dataclasses.replace(shipped, efficiency=dataclasses.replace(
        shipped.efficiency, moe_by_weights=MappingProxyType({})))
    truth = dataclasses.replace(dense, efficiency=dense.efficiency.with_moe_for(dtype, _MOE_TRUTH))
    tables = synthetic_tables(truth, noise=0.0, seed=6, families=(family,))
    result = fit_profile(dense, tables, seed=0)
    fitted = result.gpu.efficiency
    assert set(fitted.moe_by_weights) == {dtype}
    # The keys this small grid pins down (the ramp trades off against the K ramp).
    for key in ("gemm_peak_efficiency", "memory_efficiency", "kernel_launch_s",
                "moe_pair_passes"):
        assert fitted.moe_by_weights[dtype][key] == pytest.approx(_MOE_TRUTH[key], rel=0.05), key
    assert fitted.gemm_by_weights == dense.efficiency.gemm_by_weights
    for key in GEMM_KEYS:
        assert getattr(fitted, key) == getattr(dense.efficiency, key), key
    assert result.families[family].heldout.p90_ape < 0.01


def test_an_all_reduce_table_of_two_group_sizes_keeps_the_scaling_exponent() -> None:
    """From two group sizes the exponent trades off against the latency per further GPU, and
    the fit would extrapolate it to every wider group: it keeps the profile's value."""
    truth = _truth_gpu()
    tables = synthetic_tables(truth, noise=0.0, seed=1)
    allreduce = tables["allreduce"]
    two_sizes = dataclasses.replace(
        allreduce, rows=allreduce.rows[allreduce.rows["num_gpus"].isin([2, 4])])
    start = dataclasses.replace(truth, efficiency=dataclasses.replace(
        truth.efficiency, allreduce_scaling_exponent=-0.25))
    narrow = fit_profile(start, {"allreduce": two_sizes}, seed=3).gpu
    assert narrow.efficiency.allreduce_scaling_exponent == -0.25
    assert narrow.calibration is not None
    assert "allreduce_scaling_exponent" in narrow.calibration.not_fitted
    wide = fit_profile(start, {"allreduce": allreduce}, seed=3).gpu
    assert allreduce.rows["num_gpus"].nunique() >= 3
    assert wide.efficiency.allreduce_scaling_exponent == pytest.approx(0.7, rel=0.02)
