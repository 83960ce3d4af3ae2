"""The comparison table: metrics down the side, one column per arm, from summary.json.

Rows are declared once (label, how to read the cell). Common metrics always have a row, with
"–" where an arm lacks the number; the rows of optional metrics (energy, cost, disaggregation,
tenants, clipping) appear when some arm has them. Keys the table does not know are left to
summary.json, never an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any

import pandas as pd

from batchsim.apps.report.results import RunResults

Metrics = dict[str, Any]
MISSING = "–"


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    cell: Callable[[Metrics], str | None]  # None: this arm has no such number
    optional: bool = False  # shown only when some arm has a value
    alert: Callable[[Metrics], bool] | None = None  # e.g. requests were rejected


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _get(m: Metrics, *path: str) -> object:
    for key in path:
        m = m.get(key) if isinstance(m, dict) else None  # type: ignore[assignment]
    return m


def duration(seconds: object) -> str | None:
    """A latency with the unit that keeps it short: 850 µs, 15.1 ms, 303.18 s."""
    value = _number(seconds)
    if value is None:
        return None
    if value < 1e-3:
        return f"{value * 1e6:,.0f} µs"
    if value < 1.0:
        return f"{value * 1e3:,.1f} ms"
    return f"{value:,.2f} s"


def _fmt(fmt: str, *path: str) -> Callable[[Metrics], str | None]:
    def cell(m: Metrics) -> str | None:
        value = _number(_get(m, *path))
        return None if value is None else format(value, fmt)
    return cell


def _pair(render: Callable[[object], str | None], *paths: tuple[str, ...]
          ) -> Callable[[Metrics], str | None]:
    """"a / b" from two values (p50 / p99, mean / max), or more ("a / b / c")."""
    def cell(m: Metrics) -> str | None:
        parts = [render(_get(m, *path)) for path in paths]
        if all(part is None for part in parts):
            return None
        return " / ".join(MISSING if part is None else part for part in parts)
    return cell


def _percent(value: object) -> str | None:
    number = _number(value)
    return None if number is None else f"{number:.1%}"


def _preempted_and_shed(tenant: str) -> Callable[[Metrics], str | None]:
    """A tenant's preemptions and shed requests; a tenant none was shed of has no
    `shed_overload` key (0 then), a summary from before these counts has neither (no cell)."""
    def cell(m: Metrics) -> str | None:
        preemptions = _number(_get(m, "tenants", tenant, "preemptions"))
        if preemptions is None:
            return None
        shed = _number(_get(m, "tenants", tenant, "rejected_by_reason", "shed_overload")) or 0
        return f"{preemptions:,.0f} / {shed:,.0f}"
    return cell


def _percent_of(*path: str) -> Callable[[Metrics], str | None]:
    return lambda m: _percent(_get(m, *path))


def _p50_p99(key: str) -> Callable[[Metrics], str | None]:
    return _pair(duration, (key, "p50"), (key, "p99"))


def _rejected(m: Metrics) -> str | None:
    """The count, and how many for each reason: rejections are never hidden."""
    count = _number(m.get("rejected"))
    if count is None:
        return None
    reasons = m.get("rejected_by_reason")
    text = f"{count:,.0f}"
    if isinstance(reasons, dict) and reasons:
        text += " (" + ", ".join(f"{kind}: {n:,}" for kind, n in reasons.items()) + ")"
    return text


def _slo_met(m: Metrics) -> str | None:
    verdicts = m.get("slo_met")
    if not isinstance(verdicts, dict) or not verdicts:
        return None
    words = {True: "met", False: "missed", None: "no data"}
    return ", ".join(f"{key.removesuffix('_p99_s').upper()} {words.get(v, '?')}"
                     for key, v in verdicts.items())


def _missed_slo(m: Metrics) -> bool:
    verdicts = m.get("slo_met")
    return isinstance(verdicts, dict) and any(v is False for v in verdicts.values())


COMMON_ROWS = (
    Row("measured requests", _fmt(",.0f", "measured_requests")),
    Row("completed", _fmt(",.0f", "completed")),
    Row("rejected", _rejected, alert=lambda m: bool(_number(m.get("rejected")))),
    Row("request throughput (req/s)", _fmt(",.2f", "request_throughput_rps")),
    Row("output throughput (tok/s)", _fmt(",.0f", "output_throughput_tps")),
    Row("total throughput (tok/s)", _fmt(",.0f", "total_throughput_tps")),
    Row("TTFT p50 / p99", _p50_p99("ttft_s")),
    Row("TPOT p50 / p99", _p50_p99("tpot_s")),
    # The max shows a rare stall below every percentile; per request, how many saw one.
    Row("ITL p50 / p99 / max",
        _pair(duration, ("itl_s", "p50"), ("itl_s", "p99"), ("itl_s", "max"))),
    Row("per-request max gap p50 / p99", _p50_p99("max_gap_s")),
    Row("E2E p50 / p99", _p50_p99("e2e_s")),
    Row("queue delay p50 / p99", _p50_p99("queue_delay_s")),
    Row("goodput (req/s)", _fmt(",.2f", "goodput_rps")),
    Row("SLO attainment", _percent_of("slo_attainment")),
    Row("p99 vs SLO target", _slo_met, optional=True, alert=_missed_slo),
    Row("preemptions per 1,000 requests", _fmt(",.1f", "preemptions_per_1000_requests")),
    Row("recomputed tokens (share)", _percent_of("recomputed_token_fraction")),
    Row("KV-cache use mean / max",
        _pair(_percent, ("kv_utilization", "mean"), ("kv_utilization", "max"))),
    Row("mean batch size (sequences)", _fmt(",.1f", "mean_batch_size")),
    Row("GPU busy", _percent_of("gpu_busy_fraction")),
)

# Energy needs a profile with `power`, cost a price (`pricing`): rows only when some arm has it.
ENERGY_ROWS = (
    Row("energy per output token (J)", _fmt(",.3f", "energy", "joules_per_output_token"),
        optional=True),
    Row("mean power per GPU (W)", _fmt(",.0f", "energy", "mean_power_per_gpu_w"),
        optional=True),
    Row("$ per M output tokens", _fmt(",.3f", "cost", "usd_per_million_output_tokens"),
        optional=True),
    Row("$ per M total tokens", _fmt(",.3f", "cost", "usd_per_million_total_tokens"),
        optional=True),
)

OPTIONAL_ROWS = (
    Row("GPUs", _fmt(",.0f", "gpus"), optional=True),
    Row("KV transfer p50 / p99", _p50_p99("kv_transfer_s"), optional=True),
    Row("KV link utilisation", _percent_of("kv_link_utilization"), optional=True),
    Row("Jain's index (tenant service)", _fmt(".3f", "fairness", "jain_index"), optional=True),
    Row("clipped requests", lambda m: _fmt(",.0f", "clipped_requests")(m)
        if _number(m.get("clipped_requests")) else None, optional=True),
)


def _tenant_rows(metrics: list[Metrics]) -> list[Row]:
    """Per-tenant TTFT, SLO attainment, goodput, preemptions and shed requests, for every
    tenant any arm reports."""
    names: list[str] = []
    for m in metrics:
        tenants = m.get("tenants")
        names += [n for n in (tenants if isinstance(tenants, dict) else {}) if n not in names]
    rows = []
    for name in names:
        rows += [
            Row(f"tenant {name}: TTFT p50 / p99",
                _pair(duration, ("tenants", name, "ttft_s", "p50"),
                      ("tenants", name, "ttft_s", "p99")), optional=True),
            Row(f"tenant {name}: SLO attainment",
                _percent_of("tenants", name, "slo_attainment"), optional=True),
            Row(f"tenant {name}: goodput (req/s)",
                _fmt(",.2f", "tenants", name, "goodput_rps"), optional=True),
            Row(f"tenant {name}: preemptions / shed", _preempted_and_shed(name), optional=True),
        ]
    return rows


def table_rows(metrics: list[Metrics]) -> list[tuple[str, list[tuple[str, bool]]]]:
    """(label, [(cell text, alert) per arm]) for every row that is shown."""
    shown = []
    for row in (*COMMON_ROWS, *ENERGY_ROWS, *OPTIONAL_ROWS, *_tenant_rows(metrics)):
        cells = [row.cell(m) for m in metrics]
        if row.optional and all(cell is None for cell in cells):
            continue
        alerts = [row.alert is not None and row.alert(m) for m in metrics]
        shown.append((row.label, [(MISSING if c is None else c, a)
                                  for c, a in zip(cells, alerts, strict=True)]))
    return shown


def comparison_table_html(results: RunResults) -> str:
    """The table as HTML, laid out by pandas' Styler: a column per arm, a row per metric, the
    alert cells classed `alert`. Every text is escaped here, since Styler prints cells as
    given; the fixed table id keeps the page's bytes the same from run to run."""
    rows = table_rows([arm.metrics for arm in results.arms])
    columns = pd.RangeIndex(len(results.arms), name="metric")
    text = pd.DataFrame([[escape(t) for t, _ in cells] for _, cells in rows], columns=columns)
    alerts = pd.DataFrame([["alert" if alert else "" for _, alert in cells] for _, cells in rows],
                          columns=columns)
    styler = (text.style.set_uuid("comparison").set_table_attributes('class="comparison"')
              .set_td_classes(alerts)
              .relabel_index([escape(label) for label, _ in rows], axis=0)
              .relabel_index([escape(arm.label) for arm in results.arms], axis=1))
    return styler.to_html(cell_ids=False)
