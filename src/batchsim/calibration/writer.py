"""Render a fitted profile as YAML: the spec text verbatim, then the fitted blocks."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from batchsim.calibration.parameters import round_significant
from batchsim.gpu.calibration_record import CalibrationRecord
from batchsim.gpu.hardware import GEMM_KEYS, MOE_KEYS, QUANT_KEYS, GpuProfile, RooflineEfficiency

_EFFICIENCY_COMMENTS = {
    "gemm_peak_efficiency": "e_c for large GEMMs",
    "gemm_ramp_tokens": "e_c(M) = peak * M / (M + ramp)",
    "memory_efficiency": "e_m: weight and activation streaming",
    "kernel_launch_s": "per GEMM",
    "gemm_overlap_power": "p of (compute^p + memory^p)^(1/p)",
    "gemm_k_step_s": "serial K loop: seconds per unit of K ...",
    "gemm_k_split": "... up to this K, where the library splits K",
    "attention_launch_s": "per attention kernel",
    "decode_per_seq_head_s": "decode: per (sequence, KV head)",
    "kv_read_efficiency": "e_kv: decode KV streaming",
    "attention_compute_efficiency": "e_attn: prefill FLOPs",
    "attention_ramp_tokens": "e_attn(W) = e_attn * W / (W + ramp), W = q-head tokens",
    "prefill_memory_efficiency": "prefill Q/K/V/O traffic",
    "attention_overlap_power": "p of prefill (compute^p + traffic^p)^(1/p)",
    "allreduce_latency_s": "alpha on 2 GPUs ...",
    "allreduce_latency_per_gpu_s": "... plus this per further GPU",
    "allreduce_bandwidth_efficiency": "bus bandwidth / link bandwidth on 2 GPUs",
    "allreduce_scaling_exponent": "bus bandwidth * (2 / GPUs)^exponent",
    "gemm_ramp_k": "e_c(K) = ... * K / (K + ramp_k): per-tile fill",
    "gemm_wave_exponent": "compute * (wave efficiency)^-exponent",
    "decode_mha_split_kv": "decode kernel splits MHA sequences too",
    "decode_unsplit_fill": "(seq, KV head) units/SM saturating HBM, unsplit",
    "decode_split_fill": "... the same when the kernel splits",
    "decode_overlap_fraction": "max(work, KV read) + this * min",
    "decode_combine_s": "split-KV combine kernel",
    "decode_regroup_s": "grouped-query copies (FA2, >1 seq and KV head)",
    "prefill_setup_s": "prefill: fixed cost beyond the shared launch",
    "step_overhead_s": "c0 per step (prior: not measured by operator tables)",
    "per_seq_overhead_s": "c1 per sequence (prior: not measured by operator tables)",
    "gemm_quant_token_s": "activation quantisation: s per token (row)",
    "moe_pair_passes": "hidden-row passes per routed pair",
}
_NOT_TOP_LEVEL = {"calibrated", "note", "gemm_by_weights", "moe_by_weights", *QUANT_KEYS,
                  *MOE_KEYS}


def render_profile(spec_text: str, gpu: GpuProfile) -> str:
    """The full profile YAML text of `gpu` below `spec_text`."""
    parts = [spec_text.rstrip(), "", _efficiency_block(gpu.efficiency)]
    if gpu.calibration is not None:
        parts.append(_calibration_block(gpu.calibration))
    return "\n".join(parts).rstrip() + "\n"


def write_profile(path: Path, spec_text: str, gpu: GpuProfile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_profile(spec_text, gpu), encoding="utf-8")


def number(value: float) -> str:
    """Four significant digits, always read back by YAML as a number (never `3e-06`)."""
    value = round_significant(value)
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e6:
        text = f"{value:.4g}"
        return text if any(c in text for c in ".e") else f"{text}.0"
    return f"{value:.3e}"


def _efficiency_block(eff: RooflineEfficiency) -> str:
    header = (
        "# Roofline efficiencies (docs/design.md §3), "
        + ("fitted by `batchsim calibrate fit`." if eff.calibrated else "uncalibrated priors.")
    )
    lines = [header, "efficiency:", f"  calibrated: {'true' if eff.calibrated else 'false'}"]
    lines.append("  note: >-")
    lines.extend(f"    {line}" for line in _wrap(eff.note, 92))
    for field in dataclasses.fields(RooflineEfficiency):
        if field.name in _NOT_TOP_LEVEL:
            continue
        lines.append(_key_line("  ", field.name, getattr(eff, field.name)))
    if eff.gemm_by_weights:
        lines += _gemm_by_weights_lines(eff.gemm_by_weights)
    if eff.moe_by_weights:
        lines += _moe_by_weights_lines(eff.moe_by_weights)
    return "\n".join(lines) + "\n"


def _key_line(indent: str, key: str, raw: float | bool) -> str:
    value = ("true" if raw else "false") if isinstance(raw, bool) else number(float(raw))
    comment = _EFFICIENCY_COMMENTS.get(key, "")
    return f"{indent}{key}: {value}".ljust(44) + (f"# {comment}" if comment else "")


def _gemm_by_weights_lines(by_weights: Mapping[str, Mapping[str, float]]) -> list[str]:
    return _by_weights_lines(
        ["  # GEMMs with these weights run their own kernels: every GEMM key again, fitted",
         "  # on their own tables, and the kernel that quantises their activations.",
         "  gemm_by_weights:"], by_weights, (*GEMM_KEYS, *QUANT_KEYS))


def _moe_by_weights_lines(by_weights: Mapping[str, Mapping[str, float]]) -> list[str]:
    return _by_weights_lines(
        ["  # Routed experts run fused-MoE kernels: GEMM keys of their own, fitted on those",
         "  # kernels' tables, and the passes over each routed pair's hidden row.",
         "  moe_by_weights:"], by_weights, (*GEMM_KEYS, *MOE_KEYS))


def _by_weights_lines(head: list[str], by_weights: Mapping[str, Mapping[str, float]],
                      keys: tuple[str, ...]) -> list[str]:
    lines = list(head)
    for dtype in sorted(by_weights):
        lines.append(f"    {dtype}:")
        lines += [_key_line("      ", key, by_weights[dtype][key]) for key in keys]
    return lines


def _calibration_block(record: CalibrationRecord) -> str:
    lines = ["# What the fit saw, and its error on a held-out random fifth of the rows.",
             "calibration:", "  method: >-"]
    lines.extend(f"    {line}" for line in _wrap(record.method, 92))
    lines += [f"  seed: {record.seed}", f"  holdout_fraction: {number(record.holdout_fraction)}"]
    lines.append("  sources:")
    for source in record.sources:
        lines += [
            f"    - family: {source.family}",
            f"      file: {source.file}",
            f"      rows: {source.rows}",
            f"      filter: \"{source.filter}\"",
        ]
        if source.origin:  # JSON's quoting is YAML's
            lines.append(f"      origin: {json.dumps(source.origin, ensure_ascii=False)}")
    lines.append("  heldout_error:              # absolute percentage error, 0.05 = 5%")
    for family, error in record.heldout_error.items():
        lines.append(
            f"    {family}: {{rows: {error.rows}, median_ape: {error.median_ape:.4f}, "
            f"p90_ape: {error.p90_ape:.4f}}}"
        )
    lines.append(f"  not_fitted: [{', '.join(record.not_fitted)}]")
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line] if line else lines
