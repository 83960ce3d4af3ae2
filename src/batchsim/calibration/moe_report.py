"""The fidelity report's comparison of routed-expert pricing before and after the MoE fit.

Rendered from the held-out samples kept in the repository, so a test can check the committed
`docs/fidelity.md` without the public tables: each sample is priced with the profile's fitted
MoE keys and with the dense GEMM keys of the same weights, which is how the simulator priced
routed experts before those kernels were fitted.
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
                lines.append(_row(gpu, family, label, tables[family]))
    return "\n".join(lines) + "\n"


def _row(gpu: GpuProfile, family: str, label: str, table: FamilyTable) -> str:
    before = _errors(_without_moe_keys(gpu), family, table)
    after = _errors(gpu, family, table)
    return (f"| {gpu.name} | {label} | {len(table.rows)} | {before[0]:.1%} | {before[1]:.1%} | "
            f"{before[2]:+.0%} | {after[0]:.1%} | {after[1]:.1%} | {after[2]:+.0%} |")


def _errors(gpu: GpuProfile, family: str, table: FamilyTable) -> tuple[float, float, float]:
    """(median and p90 absolute percentage error, median signed error) of the rows."""
    ratio = PREDICTORS[family](table.rows, gpu, gpu.efficiency) / table.rows["seconds"]
    absolute = np.abs(ratio - 1.0)
    return (float(np.median(absolute)), float(np.quantile(absolute, 0.9)),
            float(np.median(ratio - 1.0)))


def _without_moe_keys(gpu: GpuProfile) -> GpuProfile:
    efficiency = dataclasses.replace(gpu.efficiency, moe_by_weights=MappingProxyType({}))
    return dataclasses.replace(gpu, efficiency=efficiency)
