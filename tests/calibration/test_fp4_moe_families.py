"""FP4 fused-MoE experts (issue #21): nvfp4 and weight-only mxfp4 expert tables are read,
filtered and fitted into keys of their own, added to a fitted profile without touching the rest,
and the profiles price FP4 routed experts with those keys."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd
import pytest

from batchsim.calibration.fit import FitError, fit_families
from batchsim.calibration.predict import PREDICTORS
from batchsim.calibration.spec import load_gpu_spec
from batchsim.calibration.tables import FamilyTable, family_of, load_measurements
from batchsim.calibration.writer import render_profile
from batchsim.gpu.calibration_record import FAMILIES, MeasurementSource
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import GEMM_KEYS, GpuProfile, load_gpu_profile, parse_gpu_profile
from batchsim.gpu.model_spec import load_model

_FP4_MOE = {"moe_fp4": "nvfp4", "moe_mxfp4": "mxfp4"}
_GPT_OSS = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
_MARLIN = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts"
_HEAD = ("kernel_source,moe_dtype,distribution,num_tokens,hidden_size,inter_size,topk,"
         "num_experts,moe_tp_size,moe_ep_size,latency\n")


def test_fp4_moe_tables_are_told_apart_by_name() -> None:
    assert family_of(Path("b200_sxm_moe_perf_fp4.csv.gz")) == "moe_fp4"
    assert family_of(Path("h200_sxm_moe_perf_mxfp4.csv.gz")) == "moe_mxfp4"
    assert family_of(Path("b200_sxm_moe_perf_bf16.csv.gz")) == "moe"
    assert family_of(Path("b200_sxm_moe_perf_fp8_block.csv.gz")) == "moe_fp8"
    assert family_of(Path("b200_sxm_moe_perf_fp8.csv.gz")) is None


def test_fp4_moe_rows_keep_their_dtype_balanced_routing_and_kernel(tmp_path: Path) -> None:
    shape = "2880,2880,4,128,1,64"
    (tmp_path / "g_moe_perf_fp4.csv").write_text(
        _HEAD
        + f"trtllm,nvfp4,balanced,1,{shape},0.1\n"
        + f"trtllm,nvfp4,balanced,2,{shape},0.2\n"
        + f"cutlass,nvfp4,balanced,1,{shape},0.9\n"  # the layout's minority kernel
        + f"trtllm,nvfp4,power_law_1.2,1,{shape},0.8\n"
        + f"trtllm,bfloat16,balanced,1,{shape},0.7\n", encoding="utf-8")
    (tmp_path / "g_moe_perf_mxfp4.csv").write_text(
        _HEAD
        + f"{_GPT_OSS},w4a16_mxfp4,balanced,1,{shape},0.3\n"
        # As many Marlin rows in the layout (a tie the majority rule cannot break): left out.
        + f"{_MARLIN},w4a16_mxfp4,balanced,1,{shape},0.6\n"
        + f"mxfp8,w4a8_mxfp4_mxfp8,balanced,1,{shape},0.5\n", encoding="utf-8")
    tables = load_measurements(tmp_path, "g_")
    assert set(tables) == {"moe_fp4", "moe_mxfp4"}
    assert tables["moe_fp4"].rows["latency"].tolist() == [0.1, 0.2]
    assert tables["moe_fp4"].source.filter == (
        "moe_dtype == nvfp4; distribution == balanced; per (moe_tp_size, moe_ep_size) its most "
        "frequent kernel_source")
    assert tables["moe_mxfp4"].rows["latency"].tolist() == [0.3]
    assert "kernel_source contains gptossmxfp4" in tables["moe_mxfp4"].source.filter


# A fused-MoE kernel unlike the dense keys and every starting point.
_TRUTH = {"gemm_peak_efficiency": 0.43, "gemm_ramp_tokens": 30.0, "memory_efficiency": 0.71,
          "kernel_launch_s": 1.2e-5, "moe_pair_passes": 2.5}


def _before(gpu: GpuProfile, family: str) -> GpuProfile:
    """`gpu` as it was before `family` was fitted: no keys, source or error of it."""
    dtype = _FP4_MOE[family]
    own = {d: k for d, k in gpu.efficiency.moe_by_weights.items() if d != dtype}
    record = gpu.calibration
    assert record is not None
    record = dataclasses.replace(
        record, sources=tuple(s for s in record.sources if s.family != family),
        heldout_error={f: e for f, e in record.heldout_error.items() if f != family})
    return dataclasses.replace(gpu, calibration=record, efficiency=dataclasses.replace(
        gpu.efficiency, moe_by_weights=MappingProxyType(own)))


def _families(gpu: GpuProfile) -> set[str]:
    assert gpu.calibration is not None
    return set(gpu.calibration.heldout_error)


def _synthetic(truth: GpuProfile, family: str) -> dict[str, FamilyTable]:
    grid = itertools.product([1, 4, 16, 64, 256, 1024, 4096, 16384],
                             [(2880, 2880, 4, 32), (2048, 768, 8, 128), (7168, 2048, 8, 256)],
                             [(1, 1), (4, 1), (1, 8)])
    rows = pd.DataFrame([(t, *model, *layout) for t, model, layout in grid], columns=[
        "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
        "moe_ep_size"])
    rows["seconds"] = PREDICTORS[family](rows, truth, truth.efficiency)
    rows["latency"] = rows["seconds"] * 1e3
    source = MeasurementSource(family, f"synthetic-{family}.csv", len(rows), "all rows")
    return {family: FamilyTable(family=family, rows=rows, source=source)}


@pytest.mark.parametrize(("gpu_name", "family"), [("b200", "moe_fp4"), ("h200-sxm", "moe_mxfp4")])
def test_a_fp4_moe_family_is_fitted_into_its_own_keys_and_nothing_else(
    gpu_name: str, family: str
) -> None:
    before = _before(load_gpu_profile(gpu_name), family)
    dtype = _FP4_MOE[family]
    truth = dataclasses.replace(before, efficiency=before.efficiency.with_moe_for(dtype, _TRUTH))
    result = fit_families(before, _synthetic(truth, family), (family,))
    fitted = result.gpu
    own = fitted.efficiency.moe_by_weights[dtype]
    for key in ("gemm_peak_efficiency", "memory_efficiency", "kernel_launch_s",
                "moe_pair_passes"):
        assert own[key] == pytest.approx(_TRUTH[key], rel=0.05), key
    assert result.families[family].heldout.p90_ape < 0.01
    # Every other key, block and record is the profile's, the new family's record added last.
    assert {d: k for d, k in fitted.efficiency.moe_by_weights.items() if d != dtype} == dict(
        before.efficiency.moe_by_weights)
    assert fitted.efficiency.gemm_by_weights == before.efficiency.gemm_by_weights
    for key in GEMM_KEYS:
        assert getattr(fitted.efficiency, key) == getattr(before.efficiency, key), key
    assert before.calibration is not None and fitted.calibration is not None
    sources = fitted.calibration.sources
    assert tuple(s for s in sources if s.family != family) == before.calibration.sources
    assert [s.family for s in sources] == [f for f in FAMILIES if f in {*_families(before), family}]
    assert list(fitted.calibration.heldout_error) == [s.family for s in sources]
    for name, error in before.calibration.heldout_error.items():
        assert fitted.calibration.heldout_error[name] == error
    assert fitted.efficiency.note.startswith(before.efficiency.note.split(". step_")[0])
    assert f", {family} " in fitted.efficiency.note
    # What the writer renders loads back with the new block.
    reloaded = parse_gpu_profile(render_profile(load_gpu_spec(gpu_name).spec_text, fitted),
                                 "reloaded.yaml")
    assert dict(reloaded.efficiency.moe_by_weights[dtype]) == pytest.approx(dict(own), rel=1e-3)


def test_only_families_with_tables_can_be_added() -> None:
    h200 = load_gpu_profile("h200-sxm")
    with pytest.raises(FitError, match="no moe_fp4 table"):
        fit_families(h200, {}, ("moe_fp4",))
    with pytest.raises(FitError, match="unknown family 'moe_fp16'"):
        fit_families(h200, {}, ("moe_fp16",))


def _without_fp4_moe_keys(gpu: GpuProfile) -> GpuProfile:
    own = {d: k for d, k in gpu.efficiency.moe_by_weights.items() if d not in ("nvfp4", "mxfp4")}
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(
        gpu.efficiency, moe_by_weights=MappingProxyType(own)))


def _with_moe_block(gpu: GpuProfile, dtype: str, block: dict[str, float]) -> GpuProfile:
    own = {**gpu.efficiency.moe_by_weights, dtype: MappingProxyType(block)}
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(
        gpu.efficiency, moe_by_weights=MappingProxyType(own)))


def _gpt_oss_decode_linear_s(gpu: GpuProfile, weights: str) -> float:
    cost = RooflineCostModel(load_model("gpt-oss-120b"), gpu, tensor_parallel=1,
                             weight_dtype=weights, kv_dtype="bf16")
    return cost.step_time(np.ones(32, dtype=np.int64), np.full(32, 1000), 32).linear_s


@pytest.mark.parametrize(
    ("gpu_name", "dtype", "borrowed"),
    [("b200", "nvfp4", "fp8"), ("b200", "mxfp4", "fp8"), ("gb300", "nvfp4", "fp8"),
     ("h200-sxm", "mxfp4", "bf16"), ("h100-sxm", "mxfp4", "bf16")],
)
def test_a_profile_prices_fp4_experts_with_their_own_moe_keys(
    gpu_name: str, dtype: str, borrowed: str
) -> None:
    gpu = load_gpu_profile(gpu_name)
    eff = gpu.efficiency
    assert gpu.peak_flops.gemm_keys_for(dtype, eff.moe_by_weights) == dtype
    # The layer GEMMs outside the experts keep their keys (mxfp4 has no GEMM tables).
    dense = "nvfp4" if gpu.peak_flops.fp4 is not None else "bf16"
    assert gpu.peak_flops.gemm_keys_for(dtype, eff.gemm_by_weights) == dense
    before = _without_fp4_moe_keys(gpu)
    assert before.peak_flops.gemm_keys_for(dtype, before.efficiency.moe_by_weights) == borrowed
    shipped = _gpt_oss_decode_linear_s(gpu, dtype)
    old = _gpt_oss_decode_linear_s(before, dtype)
    assert shipped != pytest.approx(old, rel=1e-3)
    # The own block is what prices them: set to the borrowed one, the old price comes back ...
    as_borrowed = _with_moe_block(gpu, dtype, dict(eff.moe_by_weights[borrowed]))
    assert _gpt_oss_decode_linear_s(as_borrowed, dtype) == pytest.approx(old, rel=1e-12)
    # ... and slower weight streaming in it makes the step slower.
    slower = dict(eff.moe_by_weights[dtype])
    slower["memory_efficiency"] *= 0.5
    assert _gpt_oss_decode_linear_s(_with_moe_block(gpu, dtype, slower), dtype) > shipped


def test_mxfp4_experts_borrow_nvfp4_moe_keys_where_only_those_are_fitted() -> None:
    b200 = load_gpu_profile("b200")
    own = {d: k for d, k in b200.efficiency.moe_by_weights.items() if d != "mxfp4"}
    assert b200.peak_flops.gemm_keys_for("mxfp4", own) == "nvfp4"
    # Hopper has no FP4 cores and no nvfp4 experts: nvfp4 runs weight-only with bf16's keys.
    h200 = load_gpu_profile("h200-sxm")
    assert h200.peak_flops.gemm_keys_for("nvfp4", h200.efficiency.moe_by_weights) == "bf16"


@pytest.mark.parametrize("gpu_name", ["h100-sxm", "h200-sxm", "b200", "b300", "gb200", "gb300"])
def test_shipped_fp4_moe_samples_score_like_the_recorded_error(gpu_name: str) -> None:
    gpu = load_gpu_profile(gpu_name)
    assert gpu.calibration is not None
    samples = Path(__file__).resolve().parents[2] / "src/batchsim/hardware_profiles/measurements"
    tables = load_measurements(samples / gpu_name)
    expected = {"moe_mxfp4"} | ({"moe_fp4"} if gpu.peak_flops.fp4 is not None else set())
    assert expected <= set(tables)
    for family in expected:
        rows = tables[family].rows
        errors = np.abs(PREDICTORS[family](rows, gpu, gpu.efficiency) / rows["seconds"] - 1)
        recorded = gpu.calibration.heldout_error[family]
        assert float(np.median(errors)) < 1.3 * recorded.median_ape + 0.01, family
        assert float(np.quantile(errors, 0.9)) < 1.3 * recorded.p90_ape + 0.02, family


def test_calibrate_fit_with_families_adds_them_to_a_shipped_profile(tmp_path: Path) -> None:
    """`batchsim calibrate fit --families` refits only the named family of a fitted profile:
    fed the h200-sxm's own held-out mxfp4 rows, it writes a profile whose every other key is
    the shipped one's."""
    from typer.testing import CliRunner

    from batchsim.apps.cli import app
    from batchsim.gpu.hardware import load_gpu_profile

    shipped = Path(__file__).resolve().parents[2] / "src" / "batchsim" / "hardware_profiles"
    measurements = tmp_path / "tables"
    measurements.mkdir()
    sample = shipped / "measurements" / "h200-sxm" / "moe_perf_mxfp4.heldout.csv.gz"
    (measurements / "h200_sxm_moe_perf_mxfp4.csv.gz").write_bytes(sample.read_bytes())
    out = tmp_path / "h200.yaml"
    result = CliRunner().invoke(app, [
        "calibrate", "fit", "--gpu-spec", str(shipped / "gpus" / "h200-sxm.yaml"),
        "--measurements", str(measurements), "--families", "moe_mxfp4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "moe_mxfp4" in result.output
    before, after = load_gpu_profile("h200-sxm").efficiency, load_gpu_profile(str(out)).efficiency
    assert dataclasses.replace(after, moe_by_weights=before.moe_by_weights,
                               note=before.note) == before
    assert set(after.moe_by_weights) == set(before.moe_by_weights)
