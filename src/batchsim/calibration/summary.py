"""One line saying how far a profile's step times can be trusted."""

from __future__ import annotations

from batchsim.gpu.calibration_record import FAMILIES
from batchsim.gpu.hardware import GpuProfile

_SHORT = {
    "gemm": "gemm",
    "decode_attention": "decode",
    "prefill_attention": "prefill",
    "allreduce": "allreduce",
    "gemm_fp8": "gemm fp8",
    "moe": "moe",
    "moe_fp8": "moe fp8",
    "gemm_fp4": "gemm fp4",
    "moe_fp4": "moe fp4",
    "moe_mxfp4": "moe mxfp4",
}


def calibration_summary(gpu: GpuProfile) -> str:
    """'calibrated; held-out median/p90 error: gemm 6%/16%, ...' or 'uncalibrated ...'."""
    record = gpu.calibration
    if not gpu.efficiency.calibrated or record is None:
        return "uncalibrated (spec sheet + priors; no measured error)"
    errors = record.heldout_error
    parts = [
        f"{_SHORT[f]} {errors[f].median_ape:.0%}/{errors[f].p90_ape:.0%}"
        for f in FAMILIES
        if f in errors
    ]
    return "calibrated; held-out median/p90 error: " + ", ".join(parts)
