"""Our own H200 measurements beside the public tables: the fidelity report's last section.

Everything here is computed from files in the repository (`hardware_profiles/measurements/
h200-sxm-measured/`: the measured tables, a repeat of them on the same machine, the whole
forward steps, and held-out samples), so the section can be checked like the rest of the report.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from batchsim.calibration.fit import absolute_percentage_errors
from batchsim.calibration.measure.run import TABLE_NAMES
from batchsim.calibration.predict import PREDICTORS
from batchsim.calibration.tables import load_measurements
from batchsim.gpu.calibration_record import FAMILIES
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.model_spec import load_model

MEASURED_PROFILE = "h200-sxm-measured"
PUBLIC_PROFILE = "h200-sxm"
RUN_FOLDER = "run-llama-3.1-8b"
REPEAT_FOLDER = "repeat-llama-3.1-8b"


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    rows: int
    median: float
    p90: float

    @classmethod
    def of(cls, errors: np.ndarray) -> ErrorSummary:
        return cls(len(errors), float(np.median(errors)), float(np.quantile(errors, 0.9)))

    def cell(self) -> str:
        return f"{self.median:.1%} / {self.p90:.1%} ({self.rows})"


def repeatability(run: Path, repeat: Path) -> dict[str, ErrorSummary]:
    """Per family, |first / second − 1| over the shapes both runs timed."""
    result = {}
    for family in ("gemm", "decode_attention", "prefill_attention"):
        first = pd.read_csv(run / TABLE_NAMES[family])
        second = pd.read_csv(repeat / TABLE_NAMES[family])
        keys = [c for c in first.columns if c != "latency"]
        both = first.merge(second, on=keys, suffixes=("_first", "_second"))
        result[family] = ErrorSummary.of(absolute_percentage_errors(
            both["latency_first"].to_numpy(), both["latency_second"].to_numpy()))
    return result


def operator_errors(gpu: GpuProfile, samples: Path) -> dict[str, ErrorSummary]:
    """`gpu`'s error per family on the held-out samples in `samples`."""
    tables = load_measurements(samples)
    result = {}
    for family in FAMILIES:
        if family not in tables:
            continue
        rows = tables[family].rows
        predicted = PREDICTORS[family](rows, gpu, gpu.efficiency)
        result[family] = ErrorSummary.of(
            absolute_percentage_errors(predicted, rows["seconds"].to_numpy()))
    return result


def step_table(steps_csv: Path, profiles: list[GpuProfile]) -> pd.DataFrame:
    """Measured whole steps (eager and compiled, ms) beside each profile's GPU time (ms).

    The cost model's GPU time is its step time less the per-step and per-sequence engine
    overheads (priors for the CPU-side scheduler, which a bare forward pass does not run).
    """
    measured = pd.read_csv(steps_csv)
    model = load_model(str(measured["model"].iloc[0]))
    keys = ["phase", "batch_size", "new_tokens", "context"]
    table = measured.pivot_table(index=keys, columns="compiled", values="latency", sort=False)
    table = table.rename(columns={False: "eager_ms", True: "compiled_ms"}).reset_index()
    for gpu in profiles:
        cost = RooflineCostModel(model, gpu, tensor_parallel=1, weight_dtype="bf16",
                                 kv_dtype="bf16")
        table[gpu.name] = [_gpu_ms(cost, row) for row in table.to_dict("records")]
    return table


def _gpu_ms(cost: RooflineCostModel, row: Mapping[Hashable, object]) -> float:
    batch = int(str(row["batch_size"]))
    new = np.full(batch, int(str(row["new_tokens"])), dtype=np.int64)
    context = np.full(batch, int(str(row["context"])), dtype=np.int64)
    emitting = batch if row["phase"] == "decode" else 1  # prefill: only its last token
    step = cost.step_time(new, context, emitting)
    return (step.seconds - step.overhead_s) * 1e3


def device_facts(run: Path) -> dict[str, object]:
    """What `measure` recorded of the machine (device.json)."""
    facts: dict[str, object] = json.loads((run / "device.json").read_text(encoding="utf-8"))
    return facts
