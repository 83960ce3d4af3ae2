"""The sweep's comparison table: one row per (point, arm), key metrics as mean ± half-width.

The half-width is half the 95% interval (`ci95`), printed under the mean in the mean's unit;
with one replication there is none. Red cells: a p99 whose mean is above its SLO target, an
arm that rejected requests. Each arm's knee is flagged in its arm cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jinja2

from batchsim.apps.report.sweep_results import (
    MetricPath,
    SweepResults,
    SweepRow,
    short_name,
    value_text,
)
from batchsim.apps.report.table import MISSING

# A number's text in a unit: (value → (scale, unit suffix, decimals)).
Unit = Callable[[float], tuple[float, str, int]]

CSS = """
.table-wrap { overflow-x: auto; }
table.sweep { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.9em; }
table.sweep th, table.sweep td { padding: 0.2em 0.45em; border-bottom: 1px solid #eee;
       vertical-align: top; }
table.sweep thead th { border-bottom: 2px solid #999; text-align: right; font-weight: 600; }
table.sweep thead th.key, table.sweep td.key { text-align: left; }
table.sweep td { text-align: right; white-space: nowrap; }
table.sweep tr.first-of-point td, table.sweep td.point { border-top: 1px solid #bbb; }
table.sweep .ci { display: block; color: #777; font-size: 0.85em; }
table.sweep td.alert { color: #b00020; font-weight: bold; }
table.sweep .knee { background: #ffe9b3; border-radius: 3px; padding: 0 0.3em;
       font-size: 0.85em; margin-left: 0.3em; }
"""


def _plain(decimals: int, scale: float = 1.0, suffix: str = "") -> Unit:
    return lambda _value: (scale, suffix, decimals)


def _duration(value: float) -> tuple[float, str, int]:
    """The unit that keeps a latency short (as the single-run table): µs, ms or s."""
    if value < 1e-3:
        return 1e6, " µs", 0
    if value < 1.0:
        return 1e3, " ms", 1
    return 1.0, " s", 2


@dataclass(frozen=True, slots=True)
class Column:
    label: str
    path: MetricPath
    unit: Unit
    slo: str | None = None  # red when the mean is above this latency's target
    optional: bool = False  # shown only when some row's mean is not zero


COLUMNS = (
    Column("output tok/s", ("output_throughput_tps",), _plain(0)),
    Column("goodput req/s", ("goodput_rps",), _plain(2)),
    Column("SLO attainment", ("slo_attainment",), _plain(1, 100.0, "%")),
    Column("TTFT p50", ("ttft_s", "p50"), _duration),
    Column("TTFT p99", ("ttft_s", "p99"), _duration, slo="ttft_s"),
    Column("TPOT p50", ("tpot_s", "p50"), _duration),
    Column("TPOT p99", ("tpot_s", "p99"), _duration, slo="tpot_s"),
    Column("preemptions / 1k req", ("preemptions_per_1000_requests",), _plain(1)),
    Column("recomputed tokens", ("recomputed_token_fraction",), _plain(1, 100.0, "%")),
    Column("KV use mean", ("kv_utilization", "mean"), _plain(1, 100.0, "%")),
    Column("rejected", ("rejected",), _plain(1), optional=True),
)


def cell_text(row: SweepRow, column: Column) -> tuple[str, str | None]:
    """(mean, "± half-width" or None), both in the mean's unit; MISSING without a mean."""
    mean = row.mean(column.path)
    if mean is None:
        return MISSING, None
    scale, suffix, decimals = column.unit(abs(mean))
    text = f"{mean * scale:,.{decimals}f}{suffix}"
    bounds = row.interval(column.path)
    if bounds is None:
        return text, None
    half = (bounds[1] - bounds[0]) / 2
    return text, f"± {half * scale:,.{decimals}f}{suffix}"


def _alert(results: SweepResults, row: SweepRow, column: Column) -> bool:
    mean = row.mean(column.path)
    if mean is None:
        return False
    if column.path == ("rejected",):
        return mean > 0
    target = results.slo_target(column.slo) if column.slo else None
    return target is not None and mean > target


def knees(results: SweepResults) -> set[int]:
    """ids of the rows that are some arm's knee."""
    found = set()
    for group in results.groups():
        for series in results.series(group):
            knee = results.knee(series)
            if knee is not None:
                found.add(id(knee))
    return found


def _columns(results: SweepResults) -> list[Column]:
    return [c for c in COLUMNS if not c.optional
            or any(row.mean(c.path) not in (None, 0.0) for row in results.rows)]


# Laid out by jinja2 with autoescape on, so every user string (arm names, swept values) is
# escaped once, by the template; the rows' rowspans and classes are decided in Python.
_TEMPLATE = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                               keep_trailing_newline=False).from_string("""\
<div class="table-wrap">
<table class="sweep">
<thead><tr>
{%- for key in keys %}<th class="key" scope="col" title="{{ key }}">{{ short(key) }}</th>
{%- endfor %}<th class="key" scope="col">arm</th>
{%- for label in labels %}<th scope="col">{{ label }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in rows %}
<tr{% if row.span %} class="first-of-point"{% endif %}>
{%- for value in row.point %}<td class="key point" rowspan="{{ row.span }}">{{ value }}</td>
{%- endfor %}<td class="key">{{ row.arm }}{% if row.knee %} <span class="knee">knee</span>
{%- endif %}</td>
{%- for cell in row.cells %}<td{% if cell.alert %} class="alert"{% endif %}>{{ cell.mean }}
{%- if cell.half %}<span class="ci">{{ cell.half }}</span>{% endif %}</td>{% endfor %}</tr>
{% endfor %}
</tbody>
</table>
</div>""")


def _rows(results: SweepResults, columns: list[Column]) -> list[dict[str, Any]]:
    """Each row's cells; a point's first row also carries its values and how many rows (its
    arms') they span."""
    keys, knee_rows = results.parameters, knees(results)
    rows: list[dict[str, Any]] = []
    previous: dict[str, object] | None = None
    for index, row in enumerate(results.rows):
        span = 0
        if row.point != previous:  # the point's values once, spanning its arms' rows
            span = next((n for n, later in enumerate(results.rows[index:])
                         if later.point != row.point), len(results.rows) - index)
        previous = row.point
        cells = []
        for column in columns:
            mean, half = cell_text(row, column)
            cells.append({"mean": mean, "half": half, "alert": _alert(results, row, column)})
        rows.append({"span": span, "arm": row.arm, "knee": id(row) in knee_rows, "cells": cells,
                     "point": [value_text(row.point.get(k)) for k in keys] if span else []})
    return rows


def sweep_table_html(results: SweepResults) -> str:
    columns = _columns(results)
    return _TEMPLATE.render(keys=results.parameters, short=short_name,
                            labels=[c.label for c in columns], rows=_rows(results, columns))
