"""The GPU spec a fit starts from: a profile (shipped or a file) or a spec-only YAML.

A spec-only YAML is a profile without the `efficiency:` block; the fit starts from the priors
below, and families without measurements keep them. The spec part of the file is copied into
the fitted profile verbatim, comments included, so its sources stay next to its numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from batchsim.gpu.hardware import GpuProfile, HardwareError, load_gpu_profile, parse_gpu_profile

PRIOR_EFFICIENCY = MappingProxyType(
    {
        "calibrated": False,
        "note": "Uncalibrated priors: rules of thumb, not fitted to this GPU.",
        "gemm_peak_efficiency": 0.8,
        "gemm_ramp_tokens": 16.0,
        "memory_efficiency": 0.8,
        "attention_compute_efficiency": 0.6,
        "kv_read_efficiency": 0.8,
        "kernel_launch_s": 3.0e-6,
        "allreduce_latency_s": 5.0e-6,
        "step_overhead_s": 2.0e-4,
        "per_seq_overhead_s": 2.0e-6,
        "gemm_overlap_power": 2.0,
        "gemm_k_step_s": 1.5e-9,
        "gemm_k_split": 2048.0,
        "attention_launch_s": 1.0e-5,
        "decode_per_seq_head_s": 2.5e-8,
        "attention_ramp_tokens": 8192.0,
        "prefill_memory_efficiency": 0.4,
        "attention_overlap_power": 1.2,
        "allreduce_latency_per_gpu_s": 1.5e-6,
        "allreduce_bandwidth_efficiency": 0.5,
        "allreduce_scaling_exponent": 0.0,
        # The shape terms start switched off: no K ramp, no wave tail, no occupancy penalty,
        # no layout kernels, and decode's two parts simply add.
        "gemm_ramp_k": 0.0,
        "gemm_wave_exponent": 0.0,
        "decode_mha_split_kv": True,
        "decode_unsplit_fill": 0.0,
        "decode_split_fill": 0.0,
        "decode_overlap_fraction": 1.0,
        "decode_combine_s": 0.0,
        "decode_regroup_s": 0.0,
        "prefill_setup_s": 0.0,
    }
)
"""Starting values for a spec without efficiencies (and for spec-only profiles' docs)."""

_GENERATED_BLOCK = re.compile(r"^(efficiency|calibration):", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """A parsed profile and the spec text (everything above its generated blocks)."""

    profile: GpuProfile
    spec_text: str


def load_gpu_spec(spec: str) -> GpuSpec:
    """A shipped profile name, a profile YAML, or a spec-only YAML."""
    path = Path(spec).expanduser()
    if not (spec.endswith((".yaml", ".yml")) or "/" in spec):
        profile = load_gpu_profile(spec)
        path = _shipped_path(profile.name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HardwareError(f"{path}: cannot read GPU spec ({exc})") from None
    document = yaml.safe_load(text)
    if not isinstance(document, dict):
        raise HardwareError(f"{path}: expected a mapping of GPU profile fields")
    if "efficiency" not in document:
        text_with_priors = spec_text(text).rstrip() + "\n\n" + _yaml_block(
            {"efficiency": dict(PRIOR_EFFICIENCY)}
        )
        return GpuSpec(parse_gpu_profile(text_with_priors, str(path)), spec_text(text))
    return GpuSpec(parse_gpu_profile(text, str(path)), spec_text(text))


def spec_text(text: str) -> str:
    """The file up to its `efficiency:`/`calibration:` blocks, without their lead comments."""
    match = _GENERATED_BLOCK.search(text)
    head = text if match is None else text[: match.start()]
    lines = head.rstrip().split("\n")
    # Comment lines right above the block describe the old efficiencies: drop them.
    while lines and lines[-1].startswith("#"):
        lines.pop()
    return "\n".join(lines).rstrip() + "\n"


def _shipped_path(name: str) -> Path:
    from importlib import resources

    entry = resources.files("batchsim.hardware_profiles").joinpath("gpus", f"{name}.yaml")
    return Path(str(entry))


def _yaml_block(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)
