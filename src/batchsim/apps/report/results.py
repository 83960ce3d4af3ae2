"""The results folder a report is built from: summary.json and the two parquet tables.

The report reads only what `batchsim run` wrote to disk, so `batchsim report DIR` can rebuild
it without simulating again. A folder without a readable summary.json is an error; a missing
table or column only costs the plots that need it (they become notes on the page).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from batchsim.metrics.summary import measured_mask

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.parquet"
TIMESERIES_FILE = "timeseries.parquet"


class ReportError(ValueError):
    """A folder that cannot be reported on; the message names the folder or file."""


@dataclass(frozen=True, slots=True)
class ArmRow:
    """One row of summary.json: an arm (at a sweep point, once sweeps exist)."""

    name: str
    point: dict[str, Any]
    metrics: dict[str, Any]

    @property
    def label(self) -> str:
        """The column heading: the arm's name, plus its sweep point when it has one."""
        if not self.point:
            return self.name
        return self.name + " @ " + ", ".join(f"{k}={v}" for k, v in self.point.items())


@dataclass(frozen=True, slots=True)
class RunResults:
    folder: Path
    summary: dict[str, Any]
    arms: list[ArmRow]
    requests: pd.DataFrame | None  # None when the file is missing
    timeseries: pd.DataFrame | None
    missing_files: list[str] = field(default_factory=list)

    @property
    def config(self) -> dict[str, Any]:
        config = self.summary.get("config")
        return config if isinstance(config, dict) else {}

    def setting(self, key: str, default: float = 0.0) -> float:
        """A numeric top-level config value (warmup_s, cooldown_s), or the default."""
        value = self.config.get(key)
        return float(value) if isinstance(value, int | float) else default

    def slo_target(self, column: str) -> float | None:
        """The per-request SLO threshold for a latency column (`ttft_s` → `slo.ttft_p99_s`)."""
        slo = self.config.get("slo")
        value = slo.get(column.removesuffix("_s") + "_p99_s") if isinstance(slo, dict) else None
        return float(value) if isinstance(value, int | float) else None

    def measured_requests(self, arm: str) -> pd.DataFrame | None:
        """The arm's requests that count in its summary (docs/design.md §6: warm-up and cool-down
        excluded), so the plots agree with the table; None when the table cannot say."""
        frame = _rows_of(self.requests, arm)
        if frame is None or "arrival_s" not in frame.columns:
            return frame
        keep = measured_mask(frame, self.setting("warmup_s"), self.setting("cooldown_s"))
        return frame[np.asarray(keep, dtype=bool)]

    def arm_timeseries(self, arm: str) -> pd.DataFrame | None:
        return _rows_of(self.timeseries, arm)


def _rows_of(frame: pd.DataFrame | None, arm: str) -> pd.DataFrame | None:
    if frame is None or "arm" not in frame.columns:
        return None
    return frame[frame["arm"] == arm]


def read_summary(folder: Path) -> dict[str, Any]:
    """FOLDER/summary.json as a JSON object, or a ReportError naming what is wrong."""
    if not folder.is_dir():
        raise ReportError(f"{folder}: no such results folder")
    return _load_summary(folder / SUMMARY_FILE)


def load_results(folder: Path, summary: dict[str, Any] | None = None) -> RunResults:
    """A single run's folder; `summary` is its summary.json when the caller has read it."""
    if summary is None:
        summary = read_summary(folder)
    arms = _arm_rows(summary, folder / SUMMARY_FILE)
    tables = {name: _load_table(folder / name) for name in (REQUESTS_FILE, TIMESERIES_FILE)}
    missing = [name for name, table in tables.items() if table is None]
    return RunResults(folder, summary, arms, tables[REQUESTS_FILE], tables[TIMESERIES_FILE],
                      missing)


def _load_summary(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ReportError(f"{path.parent}: no {SUMMARY_FILE} here "
                          "(expected a folder written by `batchsim run`)")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ReportError(f"{path}: cannot be read ({err})") from None
    if not isinstance(document, dict):
        raise ReportError(f"{path}: expected a JSON object with 'rows' of per-arm metrics")
    return document


def _arm_rows(summary: dict[str, Any], path: Path) -> list[ArmRow]:
    rows = summary.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ReportError(f"{path}: no 'rows' of per-arm metrics")
    arms = []
    for index, row in enumerate(rows):
        if not (isinstance(row, dict) and isinstance(row.get("arm"), str)
                and isinstance(row.get("metrics"), dict)):
            raise ReportError(f"{path}: rows.{index} needs an 'arm' name and a 'metrics' object")
        point = row.get("point")
        arms.append(ArmRow(row["arm"], point if isinstance(point, dict) else {}, row["metrics"]))
    return arms


def _load_table(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    try:
        return pd.read_parquet(path)
    except (OSError, pa.ArrowException) as err:
        raise ReportError(f"{path}: not a readable parquet table ({err})") from None
