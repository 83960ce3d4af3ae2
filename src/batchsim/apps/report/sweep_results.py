"""A sweep's summary.json, read for its report: rows per (point, arm), curves, the knee.

`batchsim sweep` writes one summary row per (point, arm) with the point's values, every
metric's mean over replications (`metrics`) and its 95% interval (`ci95`, null with one
replication). A summary is a sweep's when it has a `"sweep"` key. The report reads only that
file, plus (for the deployment line of the header) the first point's own summary.json.

Curves: x is the first swept parameter; every combination of the others' values (a *group*)
is a panel row of its own, so with one parameter there is one row. Each arm is one curve per
group, its points in the order of the swept values (sorted, when they are numbers). Groups
whose rows hold the same numbers (the other parameters changed nothing) share one panel row,
labelled with all of them (`panel_groups`), so no panel is drawn twice.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchsim.apps.report.results import SUMMARY_FILE, ReportError

# The knee: the first swept value at which an arm's mean output throughput is within this
# share of its peak over the sweep. Past it, more load buys at most 1 − KNEE_SHARE more.
KNEE_SHARE = 0.95
KNEE_METRIC = ("output_throughput_tps",)

MetricPath = tuple[str, ...]


def is_sweep(summary: dict[str, Any]) -> bool:
    return "sweep" in summary


def number(value: object) -> float | None:
    """A finite int or float (not a bool); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def lookup(node: object, path: MetricPath) -> object:
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def value_text(value: object) -> str:
    """A swept value as written in the file: 64, 2.5, fp8."""
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value) if not isinstance(value, dict | list) else json.dumps(value)


@dataclass(frozen=True, slots=True)
class SweepRow:
    arm: str
    point: dict[str, Any]
    metrics: dict[str, Any]
    ci95: dict[str, Any] | None  # None: one replication
    folder: str | None

    def mean(self, path: MetricPath) -> float | None:
        return number(lookup(self.metrics, path))

    def interval(self, path: MetricPath) -> tuple[float, float] | None:
        bounds = lookup(self.ci95, path)
        if not isinstance(bounds, list) or len(bounds) != 2:
            return None
        low, high = (number(b) for b in bounds)
        return None if low is None or high is None else (low, high)


@dataclass(frozen=True, slots=True)
class Series:
    """One arm's curve in one group: its rows in x order."""

    arm_index: int
    arm: str
    rows: list[SweepRow]


@dataclass(frozen=True, slots=True)
class PanelGroup:
    """Groups drawn as one panel row: their curves are identical, so one stands for all."""

    members: list[dict[str, Any]]

    @property
    def first(self) -> dict[str, Any]:
        return self.members[0]

    def label(self) -> str:
        """"max_model_len=2048" or, merged, "max_model_len=2048 or 4096"; "" with no group."""
        if not self.first:
            return ""
        keys = list(self.first)
        varying = [k for k in keys if len({value_text(m[k]) for m in self.members}) > 1]
        fixed = [f"{short_name(k)}={value_text(self.first[k])}" for k in keys
                 if k not in varying]
        if not varying:
            return ", ".join(fixed)
        combos = " or ".join(", ".join(f"{short_name(k)}={value_text(m[k])}" for k in varying)
                             for m in self.members)
        if len(varying) == 1:
            key = short_name(varying[0])
            combos = f"{key}=" + " or ".join(value_text(m[varying[0]]) for m in self.members)
        return ", ".join([*fixed, combos])


@dataclass(frozen=True, slots=True)
class SweepResults:
    folder: Path
    summary: dict[str, Any]
    parameters: list[str]
    rows: list[SweepRow]
    replications: int

    @property
    def config(self) -> dict[str, Any]:
        config = self.summary.get("config")
        return config if isinstance(config, dict) else {}

    @property
    def arms(self) -> list[str]:
        """Arm names in the order of the rows (the file's order)."""
        return list(dict.fromkeys(row.arm for row in self.rows))

    @property
    def x_parameter(self) -> str | None:
        return self.parameters[0] if self.parameters else None

    def slo_target(self, column: str) -> float | None:
        """The SLO threshold of a latency (`ttft_s` → `slo.ttft_p99_s`), in seconds."""
        slo = self.config.get("slo")
        value = slo.get(column.removesuffix("_s") + "_p99_s") if isinstance(slo, dict) else None
        return number(value)

    def x_of(self, row: SweepRow) -> Any:
        return hashable(row.point.get(self.x_parameter or ""))

    def x_values(self) -> list[Any]:
        """The first parameter's values, in sweep order (sorted when all are numbers)."""
        values = list(dict.fromkeys(self.x_of(row) for row in self.rows))
        if values and all(number(v) is not None for v in values):
            values.sort(key=lambda v: float(v))
        return values

    def x_is_numeric(self) -> bool:
        values = self.x_values()
        return bool(values) and all(number(v) is not None for v in values)

    def groups(self) -> list[dict[str, Any]]:
        """Each combination of the other parameters' values, in sweep order."""
        seen: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in self.rows:
            rest = {key: row.point.get(key) for key in self.parameters[1:]}
            seen.setdefault(tuple(hashable(v) for v in rest.values()), rest)
        return list(seen.values())

    def panel_groups(self) -> list[PanelGroup]:
        """The groups, those whose every curve holds the same numbers merged into one."""
        merged: dict[str, list[dict[str, Any]]] = {}
        for group in self.groups():
            numbers = [(s.arm, [(self.x_of(r), r.metrics, r.ci95) for r in s.rows])
                       for s in self.series(group)]
            merged.setdefault(json.dumps(numbers, sort_keys=True, default=str), []).append(group)
        return [PanelGroup(members) for members in merged.values()]

    def series(self, group: dict[str, Any]) -> list[Series]:
        """One curve per arm in this group, points in x order; arms with no row left out."""
        order = {value: index for index, value in enumerate(self.x_values())}
        curves = []
        for index, arm in enumerate(self.arms):
            rows = [row for row in self.rows if row.arm == arm
                    and all(row.point.get(k) == v for k, v in group.items())]
            rows.sort(key=lambda row: order[self.x_of(row)])
            if rows:
                curves.append(Series(index, arm, rows))
        return curves

    def knee(self, series: Series) -> SweepRow | None:
        """The knee of a curve (None when it has none in the swept range).

        The first swept value at which the arm's mean output throughput reaches KNEE_SHARE of
        its peak over the sweep: from there on more load buys at most 5% more throughput. A
        curve whose peak is first approached at its last point has no knee (it may still be
        climbing), nor has a curve of fewer than three points or with non-numeric x.
        """
        if not self.x_is_numeric() or len(series.rows) < 3:
            return None
        values = [(row, row.mean(KNEE_METRIC)) for row in series.rows]
        present = [(row, v) for row, v in values if v is not None]
        if len(present) < 3:
            return None
        peak = max(v for _, v in present)
        if peak <= 0:
            return None
        first = next(row for row, v in present if v >= KNEE_SHARE * peak)
        return None if first is present[-1][0] else first


def hashable(value: Any) -> Any:
    """A point value usable as a dict key (lists and mappings as their JSON)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def load_sweep(folder: Path, summary: dict[str, Any]) -> SweepResults:
    path = folder / SUMMARY_FILE
    sweep = summary.get("sweep")
    if not isinstance(sweep, dict):
        raise ReportError(f"{path}: 'sweep' should be an object with the swept 'parameters'")
    parameters = sweep.get("parameters")
    if not isinstance(parameters, list) or not all(isinstance(p, str) for p in parameters):
        raise ReportError(f"{path}: sweep.parameters should be a list of dotted keys")
    rows = summary.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ReportError(f"{path}: no 'rows' of per-point, per-arm metrics")
    parsed = []
    for index, row in enumerate(rows):
        if not (isinstance(row, dict) and isinstance(row.get("arm"), str)
                and isinstance(row.get("metrics"), dict) and isinstance(row.get("point"), dict)):
            raise ReportError(f"{path}: rows.{index} needs an 'arm' name, a 'point' and a "
                              "'metrics' object")
        ci95, folder_name = row.get("ci95"), row.get("folder")
        parsed.append(SweepRow(row["arm"], row["point"], row["metrics"],
                               ci95 if isinstance(ci95, dict) else None,
                               folder_name if isinstance(folder_name, str) else None))
    replications = sweep.get("replications")
    return SweepResults(folder, summary, parameters, parsed,
                        replications if isinstance(replications, int) else 1)


def first_point_deployment(results: SweepResults) -> dict[str, Any]:
    """The `deployment` of the first point's run (model, GPU, memory plan), or {}: the sweep's
    own summary does not repeat it, and a swept parameter may change it at other points."""
    name = results.rows[0].folder
    if name is None:
        return {}
    for candidate in (results.folder / name, results.folder / name / "rep-0"):
        try:
            document = json.loads((candidate / SUMMARY_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        deployment = document.get("deployment") if isinstance(document, dict) else None
        if isinstance(deployment, dict):
            return deployment
    return {}


# Units of the swept keys people sweep most, by the key's last part, for axis labels.
_UNITS = {
    "rate": "requests/s", "concurrency": "closed-loop users", "num_requests": "requests",
    "num_blocks": "KV blocks", "max_num_seqs": "sequences", "max_num_batched_tokens": "tokens",
    "token_budget": "tokens", "replicas": "replicas", "tensor_parallel": "GPUs",
    "max_batch_size": "sequences", "max_queue": "requests", "cv": "coefficient of variation",
}


def parameter_label(key: str) -> str:
    """An axis label for a swept key: the key as in the file, and its unit when known."""
    unit = _UNITS.get(key.rsplit(".", 1)[-1])
    return f"{key} ({unit})" if unit else key


def short_name(key: str) -> str:
    return key.rsplit(".", 1)[-1]
