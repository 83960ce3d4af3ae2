"""A lesson's experiment run as `batchsim run` runs it, read back as one table.

A sweep and a plain run go through the same machinery (a plain run is a sweep of one point),
so the table holds exactly what the command writes to summary.json: one row per (point, arm),
the point's swept values as columns named after their key, each metric flattened to a dotted
column (`ttft_s.p99`, `kv_utilization.max`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pandas as pd

from batchsim.apps.executors import InProcess, LocalProcesses
from batchsim.apps.lessons.lesson import LessonRun
from batchsim.apps.sweep.cli import sweep_axes
from batchsim.apps.sweep.runs import plan_sweep, run_sweep
from batchsim.experiment.loader import load_experiment


def lesson_run(file: Path, overrides: Sequence[str] = (), jobs: int = 1) -> LessonRun:
    """Every (point, arm) row of `file` (with `overrides`), in the order summary.json has."""
    exp, _ = load_experiment(file, list(overrides))
    with TemporaryDirectory(prefix="batchsim-lesson-") as folder:
        plan = plan_sweep(file, list(overrides), sweep_axes(exp, []), exp.replications,
                          Path(folder))
        executor = LocalProcesses(jobs) if jobs > 1 else InProcess()
        with closing(executor):
            rows = run_sweep(plan, executor)
    return LessonRun(pd.DataFrame([_flat_row(row) for row in rows]), exp)


# Metrics the rows leave out: `bench_compat` restates the others under vLLM's names and
# units, so it adds no number a lesson could draw, and leaving it out keeps the rows (and the
# digests of the pages drawn from them) what they were before it existed.
_RESTATED = ("bench_compat",)


def _flat_row(row: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {"arm": row["arm"], **row["point"]}
    metrics = {key: value for key, value in row["metrics"].items() if key not in _RESTATED}
    flat.update(_flatten(metrics, ""))
    return flat


def _flatten(metrics: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif not isinstance(value, list):  # per-reason and per-bucket lists stay out
            flat[f"{prefix}{key}"] = value
    return flat
