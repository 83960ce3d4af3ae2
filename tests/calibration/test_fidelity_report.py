"""docs/fidelity.md is what `batchsim calibrate report` renders from the shipped profiles."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from batchsim.calibration.moe_report import render_moe_before_after
from batchsim.calibration.own_report import render_own_measurements
from batchsim.calibration.report import render_fidelity, target_met
from batchsim.gpu.hardware import list_gpu_profiles, load_gpu_profile
from tests.numeric_compare import text_differences

_ROOT = Path(__file__).resolve().parents[2]
_DOC = _ROOT / "docs" / "fidelity.md"
_SAMPLES = Path(str(files("batchsim.hardware_profiles"))) / "measurements"


def test_committed_fidelity_report_matches_the_shipped_profiles() -> None:
    profiles = [load_gpu_profile(name) for name in list_gpu_profiles()]
    rendered = render_fidelity(profiles, "images", render_own_measurements(_SAMPLES),
                               render_moe_before_after(profiles, _SAMPLES))
    # Compared at the printed precision, not byte for byte: the section on our own
    # measurements prices the shipped tables through the roofline, whose exp, log and
    # fractional powers numpy computes with different SIMD code on different CPUs (with and
    # without AVX-512), so a figure a last bit from a rounding boundary may print one unit
    # of its last digit apart. Text, row counts and every other figure must match.
    differences = text_differences(_DOC.read_text(encoding="utf-8"), rendered,
                                   where="docs/fidelity.md")
    assert not differences, (
        "docs/fidelity.md is stale: run `batchsim calibrate report`\n" + "\n".join(differences)
    )


def test_report_lists_every_calibrated_family_and_the_spec_only_profiles() -> None:
    text = _DOC.read_text(encoding="utf-8")
    for name in list_gpu_profiles():
        assert name in text
    # bf16: four families; fp8 GEMMs; two MoE families, also before and after their fit;
    # weight-only mxfp4 experts, also before and after theirs.
    assert text.count("| h100-sxm |") == 11
    assert "| h200-sxm | GEMM, fp8 weights |" in text and "| b200 | GEMM, fp8 weights |" in text
    for gpu in ("h100-sxm", "h200-sxm", "b200"):
        assert f"| {gpu} | MoE experts, bf16 |" in text
        assert f"| {gpu} | MoE experts, fp8 (block-scaled) |" in text


def test_targets_apply_to_gemm_and_decode_on_the_three_datacentre_gpus() -> None:
    assert target_met("h100-sxm", "gemm", 0.09, 0.24) == "yes"
    assert target_met("h100-sxm", "decode_attention", 0.11, 0.2) == "no"
    assert target_met("l40s", "gemm", 0.5, 0.9) == "—"
    assert target_met("h200-sxm", "allreduce", 0.5, 0.9) == "—"
