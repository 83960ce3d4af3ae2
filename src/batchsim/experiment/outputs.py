"""Write a run's results: requests.parquet, timeseries.parquet and summary.json (docs/design.md §8).

Nothing written depends on the machine or the clock, so the same file and seed give the same
bytes. They reach the folder all at once, summary.json last (experiment/output_folder.py).
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd

from batchsim.experiment.output_folder import naming, written_atomically
from batchsim.experiment.runner import ExperimentResult
from batchsim.gpu.hardware import GpuProfile

_VERSIONED = ("batchsim", "simpy", "numpy", "pandas", "pyarrow", "pydantic")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "unknown"
    return found


def json_safe(value: Any) -> Any:
    """NaN/inf become null: JSON has no such numbers and a missing value is what they mean."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def summary_document(result: ExperimentResult) -> dict[str, object]:
    d = result.deployment
    return {
        "config": result.experiment.model_dump(mode="json"),
        "inputs_digest": result.inputs_digest,
        "versions": versions(),
        "deployment": {
            "model": d.model.name,
            "hardware": d.gpu.name,
            "hardware_calibrated": d.gpu.efficiency.calibrated,
            "hardware_heldout_error": _heldout_error(d.gpu),
            "hardware_source": d.gpu.source,
            "max_model_len": d.max_model_len,
            "kv_blocks_per_replica": d.num_blocks,
            "kv_tokens_per_replica": d.num_blocks * result.experiment.kv_cache.block_size,
            "kv_bytes_per_token_per_gpu": d.memory.kv_bytes_per_token_per_gpu,
            "weights_bytes_per_gpu": d.memory.weights_bytes_per_gpu,
            "memory": d.describe_memory(),
            "traffic": result.traffic.source,
        },
        "rows": [{"arm": arm.name, "point": {}, "metrics": arm.metrics} for arm in result.arms],
    }


def _heldout_error(gpu: GpuProfile) -> dict[str, dict[str, float]] | None:
    """The profile's held-out operator error (docs/fidelity.md), None for a spec-only one."""
    if gpu.calibration is None:
        return None
    return {
        family: {"median_ape": error.median_ape, "p90_ape": error.p90_ape}
        for family, error in gpu.calibration.heldout_error.items()
    }


def stack_arms(frames: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    tagged = [frame.assign(arm=name)[["arm", *frame.columns]] for name, frame in frames]
    return pd.concat(tagged, ignore_index=True)


RESULT_FILES = ("requests.parquet", "timeseries.parquet", "summary.json")


def write_results(result: ExperimentResult, out_dir: Path,
                  finish: Callable[[Path], object] | None = None) -> list[Path]:
    """Write the run's files to `out_dir` as one step (`written_atomically`): under its lock,
    through a staging folder, summary.json moved into place last, so a folder holding
    summary.json is complete. `finish(folder)` adds files made from them (the report) to the
    staging folder before the move. A write failure is one `OutputWriteError`."""
    with written_atomically(out_dir) as staging:
        write_result_files(result, staging)
        if finish is not None:
            finish(staging)
    traces = [trace_path(out_dir, arm.name) for arm in result.arms if arm.trace is not None]
    return [*traces, *(out_dir / name for name in RESULT_FILES)]


def write_result_files(result: ExperimentResult, folder: Path) -> None:
    """The files themselves, written in place into an existing `folder`."""
    requests, timeseries, summary = (folder / name for name in RESULT_FILES)
    with naming(requests):
        stack_arms([(a.name, a.requests) for a in result.arms]).to_parquet(requests, index=False)
    with naming(timeseries):
        stack_arms([(a.name, a.timeseries) for a in result.arms]).to_parquet(timeseries,
                                                                              index=False)
    write_traces(result, folder)
    text = json.dumps(json_safe(summary_document(result)), indent=2, allow_nan=False)
    with naming(summary):  # a full disk shows at write or close, which name no file
        summary.write_text(text + "\n", encoding="utf-8")


TRACE_FOLDER = "traces"


def trace_path(folder: Path, arm: str) -> Path:
    """Where an arm's timeline goes (`output.trace`): `traces/<arm>.json`."""
    return folder / TRACE_FOLDER / f"{arm}.json"


def write_traces(result: ExperimentResult, folder: Path) -> None:
    """Each arm's timeline, for the arms that kept one: compact JSON (it can be large)."""
    for arm in result.arms:
        if arm.trace is None:
            continue
        path = trace_path(folder, arm.name)
        with naming(path):
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(json_safe(arm.trace), separators=(",", ":"),
                                       allow_nan=False) + "\n", encoding="utf-8")
