"""A profile with missing or impossible calibration values is rejected, naming file and key."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchsim.calibration.spec import load_gpu_spec
from batchsim.calibration.writer import render_profile
from batchsim.gpu.hardware import HardwareError, load_gpu_profile

_H100 = Path(str(files("batchsim.hardware_profiles"))) / "gpus" / "h100-sxm.yaml"


def _document() -> dict[str, Any]:
    document = yaml.safe_load(_H100.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _load(tmp_path: Path, document: dict[str, Any]) -> None:
    path = tmp_path / "fitted.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    load_gpu_profile(str(path))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("gemm_overlap_power", 0.5, r"gemm_overlap_power' must be a power in \[1, 16\]"),
        ("attention_overlap_power", 40, r"attention_overlap_power' must be a power"),
        ("allreduce_scaling_exponent", 9, r"allreduce_scaling_exponent' must be a number in"),
        ("prefill_memory_efficiency", 1.2, r"prefill_memory_efficiency' must be a fraction"),
        ("decode_per_seq_head_s", -1e-8, r"decode_per_seq_head_s' must be a non-negative"),
        ("gemm_k_split", 0, r"gemm_k_split' must be a positive number"),
        ("gemm_wave_exponent", 1.5, r"gemm_wave_exponent' must be a number in \[0, 1\]"),
        ("decode_overlap_fraction", -0.1, r"decode_overlap_fraction' must be a non-negative"),
        ("decode_unsplit_fill", -1, r"decode_unsplit_fill' must be a non-negative"),
        ("decode_mha_split_kv", "yes", r"decode_mha_split_kv' must be true or false"),
    ],
)
def test_impossible_efficiency_values_name_file_and_key(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    document = _document()
    document["efficiency"][key] = value
    with pytest.raises(HardwareError, match=r"fitted\.yaml: key 'efficiency\." + message):
        _load(tmp_path, document)


@pytest.mark.parametrize(
    "key",
    ["attention_launch_s", "gemm_k_step_s", "allreduce_scaling_exponent", "gemm_wave_exponent",
     "decode_mha_split_kv", "prefill_setup_s"],
)
def test_missing_new_efficiency_keys_are_named(tmp_path: Path, key: str) -> None:
    document = _document()
    del document["efficiency"][key]
    expected = rf"fitted\.yaml: missing required key 'efficiency\.{key}'"
    with pytest.raises(HardwareError, match=expected):
        _load(tmp_path, document)


def test_wave_and_occupancy_terms_need_the_sm_count(tmp_path: Path) -> None:
    document = _document()
    del document["sm_count"]
    expected = r"fitted\.yaml: missing key 'sm_count' .* 'efficiency\.gemm_wave_exponent' needs"
    with pytest.raises(HardwareError, match=expected):
        _load(tmp_path, document)
    for key in ("gemm_wave_exponent", "decode_unsplit_fill", "decode_split_fill"):
        document["efficiency"][key] = 0.0
    # The fp8 GEMMs' own wave term needs it as well.
    expected = r"'efficiency\.gemm_by_weights\.fp8\.gemm_wave_exponent' needs"
    with pytest.raises(HardwareError, match=expected):
        _load(tmp_path, document)
    document["efficiency"]["gemm_by_weights"]["fp8"]["gemm_wave_exponent"] = 0.0
    # So do the fused-MoE kernels' (the H100's weight-only mxfp4 experts have one).
    expected = r"'efficiency\.moe_by_weights\.mxfp4\.gemm_wave_exponent' needs"
    with pytest.raises(HardwareError, match=expected):
        _load(tmp_path, document)
    document["efficiency"]["moe_by_weights"]["mxfp4"]["gemm_wave_exponent"] = 0.0
    _load(tmp_path, document)  # with those terms off, the SM count is not needed


def test_sm_count_is_a_whole_positive_number(tmp_path: Path) -> None:
    document = _document()
    document["sm_count"] = 131.5
    with pytest.raises(HardwareError, match=r"key 'sm_count' must be a whole number of SMs"):
        _load(tmp_path, document)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda block: block.update(bf16=block["fp8"]),
         r"unknown key 'efficiency\.gemm_by_weights\.bf16'"),  # bf16 is the top level's
        (lambda block: block["fp8"].pop("gemm_quant_token_s"),
         r"missing required key 'efficiency\.gemm_by_weights\.fp8\.gemm_quant_token_s'"),
        (lambda block: block["fp8"].update(gemm_peak_efficiency=1.5),
         r"'efficiency\.gemm_by_weights\.fp8\.gemm_peak_efficiency' must be a fraction"),
        (lambda block: block["fp8"].update(gemm_overlap_power=0.5),
         r"'efficiency\.gemm_by_weights\.fp8\.gemm_overlap_power' must be a power"),
        (lambda block: block["fp8"].update(kv_read_efficiency=0.5),
         r"unknown key 'efficiency\.gemm_by_weights\.fp8\.kv_read_efficiency'"),
    ],
)
def test_a_weight_dtypes_own_gemm_keys_are_checked_like_the_top_level_ones(
    tmp_path: Path, edit: Any, message: str
) -> None:
    document = _document()
    edit(document["efficiency"]["gemm_by_weights"])
    with pytest.raises(HardwareError, match=r"fitted\.yaml: .*" + message):
        _load(tmp_path, document)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda block: block.update(fp4=block["fp8"]),
         r"unknown key 'efficiency\.moe_by_weights\.fp4'"),
        (lambda block: block["bf16"].pop("moe_pair_passes"),
         r"missing required key 'efficiency\.moe_by_weights\.bf16\.moe_pair_passes'"),
        (lambda block: block["fp8"].update(memory_efficiency=1.5),
         r"'efficiency\.moe_by_weights\.fp8\.memory_efficiency' must be a fraction"),
        (lambda block: block["fp8"].update(gemm_quant_token_s=1e-9),
         r"unknown key 'efficiency\.moe_by_weights\.fp8\.gemm_quant_token_s'"),
        (lambda block: block["bf16"].update(moe_pair_passes=-1.0),
         r"'efficiency\.moe_by_weights\.bf16\.moe_pair_passes' must be a non-negative"),
    ],
)
def test_a_weight_dtypes_moe_keys_are_checked_like_its_gemm_keys(
    tmp_path: Path, edit: Any, message: str
) -> None:
    document = _document()
    edit(document["efficiency"]["moe_by_weights"])
    with pytest.raises(HardwareError, match=r"fitted\.yaml: .*" + message):
        _load(tmp_path, document)


def test_moe_keys_belong_to_a_weight_dtypes_moe_block(tmp_path: Path) -> None:
    document = _document()
    document["efficiency"]["moe_pair_passes"] = 2.0
    with pytest.raises(HardwareError, match=r"unknown key 'efficiency\.moe_pair_passes'"):
        _load(tmp_path, document)


def test_quantisation_keys_belong_to_a_weight_dtypes_block(tmp_path: Path) -> None:
    document = _document()
    document["efficiency"]["gemm_quant_token_s"] = 1e-9  # it would tax every bf16 GEMM
    with pytest.raises(HardwareError, match=r"unknown key 'efficiency\.gemm_quant_token_s'"):
        _load(tmp_path, document)


def test_held_out_p90_below_its_median_is_impossible(tmp_path: Path) -> None:
    document = _document()
    document["calibration"]["heldout_error"]["gemm"]["p90_ape"] = 0.01
    expected = r"'calibration\.heldout_error\.gemm\.p90_ape' must be at least"
    with pytest.raises(HardwareError, match=expected):
        _load(tmp_path, document)


def test_unknown_operator_family_is_named(tmp_path: Path) -> None:
    document = _document()
    document["calibration"]["heldout_error"]["softmax"] = {
        "rows": 3, "median_ape": 0.1, "p90_ape": 0.2
    }
    expected = r"'calibration\.heldout_error\.softmax' must be one of gemm"
    with pytest.raises(HardwareError, match=expected):
        _load(tmp_path, document)


def test_calibration_without_sources_is_rejected(tmp_path: Path) -> None:
    document = _document()
    document["calibration"]["sources"] = []
    with pytest.raises(HardwareError, match=r"'calibration\.sources' must be a non-empty list"):
        _load(tmp_path, document)


def test_missing_calibration_key_is_named(tmp_path: Path) -> None:
    document = _document()
    del document["calibration"]["heldout_error"]
    with pytest.raises(HardwareError, match=r"key 'calibration\.heldout_error' must be present"):
        _load(tmp_path, document)


def test_written_profiles_read_back_with_the_same_values(tmp_path: Path) -> None:
    spec = load_gpu_spec("h100-sxm")
    path = tmp_path / "again.yaml"
    path.write_text(render_profile(spec.spec_text, spec.profile), encoding="utf-8")
    assert load_gpu_profile(str(path)) == spec.profile
    assert path.read_text(encoding="utf-8") == _H100.read_text(encoding="utf-8")


def test_a_spec_without_efficiencies_starts_from_priors(tmp_path: Path) -> None:
    document = _document()
    del document["efficiency"], document["calibration"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    spec = load_gpu_spec(str(path))
    assert spec.profile.efficiency.calibrated is False
    assert spec.profile.calibration is None
    assert "efficiency" not in spec.spec_text
