"""The fidelity report's comparison of routed-expert pricing before and after the MoE fit.

Rendered from the held-out samples kept in the repository, so a test can check the committed
`docs/fidelity.md` without the public tables: each sample is priced with the profile's fitted
MoE keys and with the dense GEMM keys of the same weights, which is how the simulator priced
routed experts before those kernels were fitted. FP4 experts, fitted later, are compared with
the keys they borrowed before: the same profile without its FP4 MoE keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

import numpy as np

from batchsim.calibration.predict import PREDICTORS
from batchsim.calibration.tables import FamilyTable, load_measurements
from batchsim.gpu.hardware import GpuProfile

MOE_FAMILIES = {"moe": "bf16 weights", "moe_fp8": "block-scaled fp8 weights"}
FP4_MOE_FAMILIES = {"moe_fp4": ("nvfp4", "nvfp4 weights (W4A4)"),
                    "moe_mxfp4": ("mxfp4", "mxfp4 weights, weight-only (W4A16)")}
"""FP4 expert families: the weight dtype whose MoE keys they fit, and a label."""


def render_moe_before_after(profiles: Sequence[GpuProfile], samples: Path) -> str:
    """The markdown section: one row per GPU and MoE family with a held-out sample."""
    lines = [
        "### Fused-MoE experts: priced with the dense GEMM keys, and with their own",
        "",
        "The held-out sample rows kept in the repository (`src/batchsim/hardware_profiles/"
        "measurements/<gpu>/moe_perf_*.heldout.csv.gz`) priced by the same expert-kernel "
        "function with the dense GEMM keys of the weights (before: how routed experts were "
        "priced until their kernels were fitted) and with the fitted `moe_by_weights` keys "
        "(after). Bias: the median of predicted / measured − 1.",
        "",
        "| GPU | experts | rows | before: median | p90 | bias | after: median | p90 | bias |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for gpu in profiles:
        folder = samples / gpu.name
        if not gpu.efficiency.moe_by_weights or not folder.is_dir():
            continue
        tables = load_measurements(folder)
        for family, label in MOE_FAMILIES.items():
            if family in tables:
                lines.append(_row(gpu, _without_moe_keys(gpu), family, label, tables[family]))
    fp4 = _fp4_rows(profiles, samples)
    return "\n".join(lines + fp4) + "\n"


def _fp4_rows(profiles: Sequence[GpuProfile], samples: Path) -> list[str]:
    """The FP4 experts' table: borrowed keys (before) against their own (after)."""
    rows = []
    for gpu in profiles:
        folder = samples / gpu.name
        own = {dtype for dtype, _ in FP4_MOE_FAMILIES.values()} & set(gpu.efficiency.moe_by_weights)
        if not own or not folder.is_dir():
            continue
        tables = load_measurements(folder)
        for family, (dtype, label) in FP4_MOE_FAMILIES.items():
            if family in tables and dtype in own:
                before = _without_moe_keys(gpu, only=set(own))
                borrowed = before.peak_flops.gemm_keys_for(dtype, before.efficiency.moe_by_weights)
                rows.append(_row(gpu, before, family, f"{label}; before: {borrowed}'s keys",
                                 tables[family]))
    if not rows:
        return []
    return [
        "",
        "FP4 experts, fitted after the others, are compared with the keys they borrowed "
        "before (before: the same profile without its FP4 `moe_by_weights` keys; on FP4 "
        "cores nvfp4 and mxfp4 experts took fp8's MoE keys at the FP4 peak, without them "
        "mxfp4's took bf16's at the bf16 rate) on their shipped held-out samples.",
        "",
        "| GPU | experts | rows | before: median | p90 | bias | after: median | p90 | bias |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


def _row(gpu: GpuProfile, before_gpu: GpuProfile, family: str, label: str,
         table: FamilyTable) -> str:
    before = _errors(before_gpu, family, table)
    after = _errors(gpu, family, table)
    return (f"| {gpu.name} | {label} | {len(table.rows)} | {before[0]:.1%} | {before[1]:.1%} | "
            f"{before[2]:+.0%} | {after[0]:.1%} | {after[1]:.1%} | {after[2]:+.0%} |")


def _errors(gpu: GpuProfile, family: str, table: FamilyTable) -> tuple[float, float, float]:
    """(median and p90 absolute percentage error, median signed error) of the rows."""
    ratio = PREDICTORS[family](table.rows, gpu, gpu.efficiency) / table.rows["seconds"]
    absolute = np.abs(ratio - 1.0)
    return (float(np.median(absolute)), float(np.quantile(absolute, 0.9)),
            float(np.median(ratio - 1.0)))


def _without_moe_keys(gpu: GpuProfile, only: set[str] | None = None) -> GpuProfile:
    """`gpu` without its MoE keys (`only`: of those weight dtypes)."""
    kept = {} if only is None else {
        dtype: keys for dtype, keys in gpu.efficiency.moe_by_weights.items() if dtype not in only}
    efficiency = dataclasses.replace(gpu.efficiency, moe_by_weights=MappingProxyType(kept))
    return dataclasses.replace(gpu, efficiency=efficiency)
