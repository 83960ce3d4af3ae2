"""GPU profiles: the shipped files, aliases, user YAMLs and their error messages."""

from __future__ import annotations

import dataclasses
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from batchsim.gpu.hardware import HardwareError, list_gpu_profiles, load_gpu_profile

_CALIBRATED = ["a100-sxm-80gb", "b200", "b300", "gb200", "gb300", "h100-sxm", "h200-sxm", "l40s"]
_SPEC_ONLY = ["mi300x"]
_BLACKWELL = ("b200", "b300", "gb200", "gb300")
_WITH_FP8_GEMMS = (*_BLACKWELL, "h100-sxm", "h200-sxm")  # fp8 GEMM tables fitted too
_WITH_FP4_GEMMS = _BLACKWELL  # and nvfp4 GEMM tables
# All-reduce tables of two group sizes (a 4-GPU tray) keep the prior scaling exponent.
_FEW_GROUP_SIZES = ("gb200", "gb300")
_OWN_MEASUREMENTS = "h200-sxm-measured"  # fitted to our own single-GPU H200 timings
_SHIPPED = sorted([*_CALIBRATED, *_SPEC_ONLY, _OWN_MEASUREMENTS])


def _h100_document() -> dict[str, object]:
    """The shipped H100 profile as a plain mapping, to edit into user profiles."""
    text = (
        Path(str(files("batchsim.hardware_profiles"))) / "gpus" / "h100-sxm.yaml"
    ).read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def _write(tmp_path: Path, document: dict[str, object], name: str = "my-gpu.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_all_shipped_profiles_are_listed() -> None:
    assert list_gpu_profiles() == _SHIPPED


def test_the_profile_of_our_own_measurements_borrows_only_all_reduce() -> None:
    own, public = load_gpu_profile(_OWN_MEASUREMENTS), load_gpu_profile("h200-sxm")
    assert own.efficiency.calibrated is True
    assert own.calibration is not None
    # One GPU measures no all-reduce: those keys are the public H200 fit's, and say so.
    assert set(own.calibration.heldout_error) == {
        "gemm", "decode_attention", "prefill_attention"
    }
    allreduce = [f.name for f in dataclasses.fields(own.efficiency)
                 if f.name.startswith("allreduce_")]
    assert set(allreduce) <= set(own.calibration.not_fitted)
    for key in allreduce:
        assert getattr(own.efficiency, key) == getattr(public.efficiency, key)
    # The spec sheet is the same GPU's.
    assert own.memory_bandwidth_bytes_per_s == public.memory_bandwidth_bytes_per_s
    assert own.peak_flops == public.peak_flops
    assert own.efficiency.gemm_peak_efficiency != public.efficiency.gemm_peak_efficiency


@pytest.mark.parametrize("name", _CALIBRATED)
def test_calibrated_profiles_record_their_data_and_held_out_error(name: str) -> None:
    gpu = load_gpu_profile(name)
    assert gpu.name == name
    assert gpu.efficiency.calibrated is True
    assert gpu.calibration is not None
    # The GPUs with public fp8 GEMM tables also have fused-MoE expert tables.
    fp8 = {"gemm_fp8", "moe", "moe_fp8"} if name in _WITH_FP8_GEMMS else set()
    fp4 = {"gemm_fp4", "moe_fp4"} if name in _WITH_FP4_GEMMS else set()
    # Weight-only MXFP4 experts (gpt-oss's kernels) wherever there are MoE tables.
    mxfp4 = {"moe_mxfp4"} if fp8 else set()
    assert set(gpu.calibration.heldout_error) == {
        "gemm", "decode_attention", "prefill_attention", "allreduce", *fp8, *fp4, *mxfp4
    }
    own_gemm_keys = ({"fp8"} if fp8 else set()) | ({"nvfp4"} if fp4 else set())
    assert set(gpu.efficiency.gemm_by_weights) == own_gemm_keys
    own_moe_keys = ({"bf16", "fp8", "mxfp4"} if fp8 else set()) | ({"nvfp4"} if fp4 else set())
    assert set(gpu.efficiency.moe_by_weights) == own_moe_keys
    assert all(source.rows > 0 for source in gpu.calibration.sources)
    held = {"allreduce_scaling_exponent"} if name in _FEW_GROUP_SIZES else set()
    assert set(gpu.calibration.not_fitted) == {"step_overhead_s", "per_seq_overhead_s", *held}
    assert 0 < gpu.efficiency.memory_efficiency <= 1
    assert gpu.memory_bytes > 40e9
    assert gpu.peak_flops.fp8 is None or gpu.peak_flops.fp8 >= gpu.peak_flops.bf16
    # Every one has INT8 cores at least at the bf16 rate, but Blackwell Ultra, which all but
    # drops them (b300.yaml's and gb300.yaml's sources).
    assert (gpu.peak_flops.int8 >= gpu.peak_flops.bf16) == (name not in ("b300", "gb300"))


@pytest.mark.parametrize("name", _SPEC_ONLY)
def test_spec_only_profiles_say_they_are_uncalibrated(name: str) -> None:
    gpu = load_gpu_profile(name)
    assert gpu.efficiency.calibrated is False
    assert gpu.calibration is None
    assert "uncalibrated" in gpu.efficiency.note.lower()
    assert gpu.peak_flops.fp8 is not None and gpu.peak_flops.fp8 > gpu.peak_flops.bf16


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("a100", "a100-sxm-80gb"), ("H100", "h100-sxm"), ("h200", "h200-sxm"), ("L40S", "l40s")],
)
def test_aliases_and_case_resolve_to_canonical_profiles(alias: str, canonical: str) -> None:
    assert load_gpu_profile(alias).name == canonical


def test_h100_spec_sheet_numbers() -> None:
    gpu = load_gpu_profile("h100-sxm")
    assert gpu.peak_flops.bf16 == 989e12
    assert gpu.memory_bandwidth_bytes_per_s == 3.35e12
    assert gpu.memory_bytes == 80 * 2**30


def test_fp8_weights_double_the_rate_where_fp8_cores_exist() -> None:
    h100 = load_gpu_profile("h100")
    assert h100.peak_flops.for_weights("fp8") == 2 * h100.peak_flops.for_weights("bf16")


def test_a100_has_no_fp8_cores_so_fp8_weights_compute_at_bf16_rate() -> None:
    a100 = load_gpu_profile("a100")
    assert a100.peak_flops.fp8 is None
    assert a100.peak_flops.for_weights("fp8") == a100.peak_flops.bf16


def test_int4_weights_compute_at_bf16_rate() -> None:
    h100 = load_gpu_profile("h100")
    assert h100.peak_flops.for_weights("int4") == h100.peak_flops.bf16
    assert h100.peak_flops.for_weights("int8") == h100.peak_flops.int8


def test_user_profile_loads_from_a_path(tmp_path: Path) -> None:
    document = _h100_document()
    document["name"] = "My-GPU"
    document["p2p_latency_s"] = "2e-5"  # YAML 1.1 reads this as a string; accept it
    _write(tmp_path, document)
    gpu = load_gpu_profile("my-gpu.yaml", base_dir=tmp_path)
    assert gpu.name == "my-gpu"
    assert gpu.p2p_latency_s == 2e-5


def test_unknown_name_lists_the_shipped_profiles() -> None:
    with pytest.raises(HardwareError, match=r"unknown GPU profile 'tpu-v5e'.*h100-sxm"):
        load_gpu_profile("tpu-v5e")


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    document = _h100_document()
    del document["memory_bytes"]
    path = _write(tmp_path, document)
    with pytest.raises(HardwareError, match=r"my-gpu\.yaml: missing required key 'memory_bytes'"):
        load_gpu_profile(str(path))


def test_missing_nested_key_names_its_path(tmp_path: Path) -> None:
    document = _h100_document()
    efficiency = document["efficiency"]
    assert isinstance(efficiency, dict)
    del efficiency["kv_read_efficiency"]
    with pytest.raises(HardwareError, match=r"'efficiency\.kv_read_efficiency'"):
        load_gpu_profile(str(_write(tmp_path, document)))


def test_bad_value_says_what_was_expected(tmp_path: Path) -> None:
    document = _h100_document()
    efficiency = document["efficiency"]
    assert isinstance(efficiency, dict)
    efficiency["memory_efficiency"] = 1.5
    with pytest.raises(HardwareError, match=r"'efficiency\.memory_efficiency' must be a fraction"):
        load_gpu_profile(str(_write(tmp_path, document)))


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    document = _h100_document()
    document["memory_bandwith_bytes_per_s"] = 1  # misspelt
    with pytest.raises(HardwareError, match=r"unknown key 'memory_bandwith_bytes_per_s'"):
        load_gpu_profile(str(_write(tmp_path, document)))


def test_missing_file_is_a_hardware_error(tmp_path: Path) -> None:
    with pytest.raises(HardwareError, match="no such GPU profile file"):
        load_gpu_profile(str(tmp_path / "absent.yaml"))


def test_sm_counts_from_the_spec_sheets() -> None:
    counts = {name: load_gpu_profile(name).sm_count for name in _SHIPPED}
    assert counts == {"a100-sxm-80gb": 108, "h100-sxm": 132, "h200-sxm": 132, "l40s": 142,
                      "mi300x": 304, "b200": 148, "h200-sxm-measured": 132,
                      "b300": 160, "gb200": 148, "gb300": 160}


def test_fp4_peak_is_optional_and_checked(tmp_path: Path) -> None:
    document = _h100_document()
    document["peak_flops"]["fp4"] = 0  # type: ignore[index]
    with pytest.raises(HardwareError, match=r"key 'peak_flops.fp4' must be a positive number"):
        load_gpu_profile(str(_write(tmp_path, document)))
    document["peak_flops"]["fp4"] = 2e15  # type: ignore[index]
    assert load_gpu_profile(str(_write(tmp_path, document))).peak_flops.fp4 == 2e15


def test_only_nvfp4_of_the_fp4_formats_gets_gemm_keys_of_its_own(tmp_path: Path) -> None:
    document = _h100_document()
    efficiency = document["efficiency"]
    assert isinstance(efficiency, dict)
    efficiency["gemm_by_weights"]["nvfp4"] = efficiency["gemm_by_weights"]["fp8"]
    loaded = load_gpu_profile(str(_write(tmp_path, document)))
    assert set(loaded.efficiency.gemm_by_weights) == {"fp8", "nvfp4"}
    # No mxfp4 tables exist to fit: its GEMMs use nvfp4's keys (`PeakFlops.gemm_keys_for`).
    efficiency["gemm_by_weights"]["mxfp4"] = efficiency["gemm_by_weights"]["fp8"]
    with pytest.raises(HardwareError, match=r"unknown key 'efficiency.gemm_by_weights.mxfp4'"):
        load_gpu_profile(str(_write(tmp_path, document)))


def test_blackwell_spec_sheet_peaks_are_dense() -> None:
    peaks = {name: load_gpu_profile(name).peak_flops for name in ("b200", "b300", "gb200", "gb300")}
    assert {name: (p.bf16, p.fp8, p.fp4) for name, p in peaks.items()} == {
        "b200": (2.25e15, 4.5e15, 9e15), "b300": (2.25e15, 4.5e15, 13.5e15),
        "gb200": (2.5e15, 5e15, 10e15), "gb300": (2.5e15, 5e15, 15e15)}
