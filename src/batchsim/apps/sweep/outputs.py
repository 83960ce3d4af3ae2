"""What a sweep writes beside its point folders, and the table it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from batchsim.apps.report.results import read_summary
from batchsim.apps.sweep.runs import SweepPlan
from batchsim.apps.terminal import print_plain
from batchsim.experiment.output_folder import naming, write_text, written_atomically
from batchsim.experiment.outputs import json_safe, versions
from batchsim.experiment.schema import Experiment

# (column label, metric path, scale, format) for the console table.
_COLUMNS = (
    ("out tok/s", ("output_throughput_tps",), 1.0, ",.0f"),
    ("TTFT p99 ms", ("ttft_s", "p99"), 1000.0, ",.0f"),
    ("TPOT p99 ms", ("tpot_s", "p99"), 1000.0, ",.1f"),
    ("goodput req/s", ("goodput_rps",), 1.0, ",.2f"),
    ("preempt/1k", ("preemptions_per_1000_requests",), 1.0, ",.1f"),
)


SUMMARY_JSON, SWEEP_PARQUET = "summary.json", "sweep.parquet"


def write_sweep_outputs(out_dir: Path, exp: Experiment, plan: SweepPlan,
                        rows: list[dict[str, Any]]) -> list[Path]:
    """The sweep's own files as one step (`written_atomically`): summary.json, sweep.parquet,
    and report.html and plots/ drawn from them and the point folders, all staged and moved in
    beside the point folders with summary.json last, so a sweep folder holding summary.json
    has the rest. A write failure is one `OutputWriteError` that leaves the previous sweep's
    files (or none) and every complete point folder, for the same command to resume from.
    Returns summary.json's and sweep.parquet's paths."""
    from batchsim.apps.report.build import write_report  # matplotlib only when drawing

    with written_atomically(out_dir) as staging:
        write_sweep_summary(staging, exp, plan, rows)
        write_report(out_dir, into=staging, summary=read_summary(staging))
    return [out_dir / SUMMARY_JSON, out_dir / SWEEP_PARQUET]


def write_sweep_summary(out_dir: Path, exp: Experiment, plan: SweepPlan,
                        rows: list[dict[str, Any]]) -> list[Path]:
    """summary.json (every metric, mean and interval per point and arm) and sweep.parquet (one
    flat row per point and arm: the point's values, each metric's mean and bounds), written
    in place into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = out_dir / SUMMARY_JSON
    document = {
        "config": exp.model_dump(mode="json"),
        "versions": versions(),
        "sweep": {"parameters": list(plan.points[0].values), "points": len(plan.points),
                  "replications": len(plan.seeds), "seeds": plan.seeds},
        "rows": rows,
    }
    write_text(summary, json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n")
    table = out_dir / SWEEP_PARQUET
    with naming(table):  # pyarrow's errors name no file
        pd.DataFrame([_flat_row(row) for row in rows]).to_parquet(table, index=False)
    return [summary, table]


def _flat_row(row: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {"arm": row["arm"], **{f"point.{k}": _scalar(v)
                                                   for k, v in row["point"].items()}}
    _flatten(row["metrics"], "", flat, suffix="")
    if row["ci95"] is not None:
        _flatten(row["ci95"], "", flat, suffix=".ci95")
    return flat


def _scalar(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool) else json.dumps(value)


def _flatten(node: Any, prefix: str, out: dict[str, Any], suffix: str) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _flatten(value, f"{prefix}{key}.", out, suffix)
    elif isinstance(node, list) and len(node) == 2 and suffix:
        out[f"{prefix[:-1]}{suffix}_low"], out[f"{prefix[:-1]}{suffix}_high"] = node
    elif isinstance(node, int | float) and not isinstance(node, bool):
        out[f"{prefix[:-1]}{suffix}"] = float(node)


def _cell(metrics: Any, ci: Any, path: tuple[str, ...], scale: float, fmt: str) -> str:
    for key in path:
        metrics = metrics.get(key) if isinstance(metrics, dict) else None
        ci = ci.get(key) if isinstance(ci, dict) else None
    if not isinstance(metrics, int | float):
        return "-"
    text = format(metrics * scale, fmt)
    if isinstance(ci, list):
        text += " ± " + format((ci[1] - ci[0]) / 2 * scale, fmt)
    return text


def print_slo_reach(out_dir: Path, console: Console) -> None:
    """Each curve's highest swept value meeting the SLO, as the report's "at a glance" says it
    (from the summary.json just written), when the file sets p99 targets."""
    from batchsim.apps.report.sweep_results import load_sweep
    from batchsim.apps.report.sweep_slo import slo_line

    results = load_sweep(out_dir, read_summary(out_dir))
    for group in results.panel_groups():
        label = group.label()
        for series in results.series(group.first):
            line = slo_line(results, series, f"{label}, {series.arm}" if label else series.arm)
            if line:
                print_plain(console, line)


def print_sweep_table(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="sweep: mean ± 95% CI half-width over replications")
    parameters = list(rows[0]["point"]) if rows else []
    for name in parameters:
        table.add_column(escape(name.rsplit(".", 1)[-1]))
    table.add_column("arm")
    for label, *_ in _COLUMNS:
        table.add_column(label, justify="right")
    for row in rows:
        cells = [_cell(row["metrics"], row["ci95"], path, scale, fmt)
                 for _, path, scale, fmt in _COLUMNS]
        # Points and arm names are the user's: escaped, so brackets print instead of styling.
        table.add_row(*(escape(str(row["point"][p])) for p in parameters), escape(row["arm"]),
                      *cells)
    console.print(table)
