"""Small held-out samples of the measurement tables, kept in the repository.

The full public tables live outside the project; a few hundred held-out rows per GPU and family
are enough for the tests, the fidelity plots and a smoke refit, and keep the clone small.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from batchsim.calibration.fit import FamilyFit
from batchsim.calibration.tables import REQUIRED_COLUMNS
from batchsim.gpu.calibration_record import FAMILIES

SAMPLE_SUFFIX = ".heldout.csv.gz"


def write_samples(
    fits: Mapping[str, FamilyFit], out: Path, *, rows: int, seed: int
) -> list[Path]:
    """Up to `rows` random held-out rows per family, in the public tables' columns."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for family, fit in fits.items():
        frame = fit.heldout_rows
        rng = np.random.default_rng(np.random.SeedSequence([seed, FAMILIES.index(family), 1]))
        chosen = np.sort(rng.permutation(len(frame))[:rows])
        sample = frame.iloc[chosen][list(REQUIRED_COLUMNS[family])]
        path = out / f"{_stem(family)}{SAMPLE_SUFFIX}"
        # mtime=0 keeps the gzip bytes the same run to run.
        sample.to_csv(path, index=False, float_format="%.6g",
                      compression={"method": "gzip", "mtime": 0})
        paths.append(path)
    return paths


def _stem(family: str) -> str:
    return {
        "gemm": "gemm_perf_bf16",
        "prefill_attention": "context_attention_perf_bf16",
        "decode_attention": "generation_attention_perf_bf16",
        "allreduce": "nccl_all_reduce",
        "gemm_fp8": "gemm_perf_fp8",
        "moe": "moe_perf_bf16",
        "moe_fp8": "moe_perf_fp8_block",
        "gemm_fp4": "gemm_perf_fp4",
        "moe_fp4": "moe_perf_fp4",
        "moe_mxfp4": "moe_perf_mxfp4",
    }[family]
