"""Predicted-vs-measured scatter plots of held-out rows, one PNG per GPU (matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from batchsim.calibration.predict import PREDICTORS
from batchsim.calibration.tables import FamilyTable
from batchsim.gpu.hardware import GpuProfile

_TITLES = {
    "gemm": "GEMM",
    "decode_attention": "decode attention",
    "prefill_attention": "prefill attention",
    "allreduce": "all-reduce",
    "gemm_fp8": "GEMM, fp8 weights",
    "moe": "MoE experts, bf16",
    "moe_fp8": "MoE experts, fp8 block",
    "gemm_fp4": "GEMM, nvfp4 weights",
    "moe_fp4": "MoE experts, nvfp4",
    "moe_mxfp4": "MoE experts, mxfp4",
}


def plot_fidelity(gpu: GpuProfile, tables: dict[str, FamilyTable], path: Path) -> Path:
    """Log-log predicted vs measured (µs) per family, with the ±25% band."""
    families = [f for f in _TITLES if f in tables]
    figure, axes = plt.subplots(1, len(families), figsize=(2.6 * len(families), 2.7), dpi=80)
    for axis, family in zip(np.atleast_1d(axes), families, strict=True):
        rows = tables[family].rows
        measured = rows["seconds"].to_numpy() * 1e6
        predicted = PREDICTORS[family](rows, gpu, gpu.efficiency) * 1e6
        low, high = min(measured.min(), predicted.min()), max(measured.max(), predicted.max())
        line = np.array([low, high])
        axis.fill_between(line, line / 1.25, line * 1.25, color="0.9")
        axis.plot(line, line, color="0.5", linewidth=0.8)
        axis.scatter(measured, predicted, s=3, alpha=0.5)
        axis.set(xscale="log", yscale="log", title=_TITLES[family], xlabel="measured µs")
        axis.title.set_fontsize(9)
        axis.tick_params(labelsize=7)
    np.atleast_1d(axes)[0].set_ylabel("predicted µs")
    figure.suptitle(f"{gpu.name}: held-out rows (band: ±25%)", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return path
