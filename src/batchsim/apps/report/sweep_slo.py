"""Which swept points meet the SLO, and each curve's highest swept value that does.

The rule is the plan's (apps/plan/verdict.py), applied to what a sweep's summary.json holds.
A point meets the SLO when every p99 target the experiment gives is met — judged on the mean
p99 with one replication and on the upper end of its 95% interval with several, so a point
that meets a target only on average does not meet it — and when at most 1% of its measured
requests were rejected: the plan counts a rejected request as an infinite latency, so more
than that puts every p99 at infinity. The plan's keep-up check (a growing queue) needs each
request's arrival and first-token time, which summary.json does not hold, so it is not
applied here; the report cannot call the plan's code either, since the plan's pages import
the report's (the import contracts forbid the cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.apps.report.sweep_results import (
    Series,
    SweepResults,
    SweepRow,
    number,
    short_name,
    value_text,
)

# (the SLO key's latency, its summary metric) of every target the plan judges.
_TARGETS = (("ttft_s", ("ttft_s", "p99")), ("tpot_s", ("tpot_s", "p99")),
            ("e2e_s", ("e2e_s", "p99")))
MAX_REJECTED_SHARE = 0.01  # above this the plan's p99 counting rejections is infinite


@dataclass(frozen=True, slots=True)
class SloReach:
    """Where one curve meets the SLO: its highest meeting row, and lower rows that miss."""

    highest: SweepRow | None  # None: no swept value meets it
    misses_below: list[SweepRow]  # rows under `highest` that miss (a non-monotone curve)


def has_targets(results: SweepResults) -> bool:
    return any(results.slo_target(latency) is not None for latency, _ in _TARGETS)


def _judged_p99(results: SweepResults, row: SweepRow, path: tuple[str, ...]) -> float | None:
    """The mean p99 with one replication, the upper end of its interval with several."""
    if results.replications > 1:
        bounds = row.interval(path)
        return None if bounds is None else bounds[1]
    return row.mean(path)


def missed(results: SweepResults, row: SweepRow) -> list[str]:
    """What the row misses: "TTFT", "TPOT", "E2E" (their judged p99), "rejections"."""
    misses = []
    for latency, path in _TARGETS:
        target = results.slo_target(latency)
        if target is None:
            continue
        judged = _judged_p99(results, row, path)
        if judged is None or judged > target:
            misses.append(latency.removesuffix("_s").upper())
    measured, rejected = number(row.metrics.get("measured_requests")), row.mean(("rejected",))
    if rejected and not (measured and rejected / measured <= MAX_REJECTED_SHARE):
        misses.append("rejections")
    return misses


def meets_slo(results: SweepResults, row: SweepRow) -> bool:
    """Every p99 target given is met (judged as the plan judges) and ≤ 1% were rejected."""
    return not missed(results, row)


def slo_reach(results: SweepResults, series: Series) -> SloReach | None:
    """The curve's highest swept value meeting the SLO; None without targets or numeric x."""
    if not has_targets(results) or not results.x_is_numeric():
        return None
    meeting = [row for row in series.rows if meets_slo(results, row)]
    if not meeting:
        return SloReach(None, [])
    highest = meeting[-1]  # rows are in x order
    below = series.rows[:[id(row) for row in series.rows].index(id(highest))]
    return SloReach(highest, [row for row in below if not meets_slo(results, row)])


SLO_DEFINITION = ("Meeting the SLO is judged as batchsim plan judges it: every p99 target met "
                  "— with replications, by the upper end of the p99's 95% interval — and at "
                  "most 1% of the measured requests rejected.")


def slo_line(results: SweepResults, series: Series, name: str) -> str:
    """One curve's highest swept value meeting the SLO, in words ("" without targets)."""
    reach = slo_reach(results, series)
    if reach is None:
        return ""
    key = short_name(results.x_parameter or "")
    if reach.highest is None:
        first = series.rows[0]
        return (f"{name}: no swept {key} meets the SLO (at {key}={value_text(results.x_of(first))}"
                f" it misses {', '.join(missed(results, first))})")
    highest = results.x_of(reach.highest)
    line = f"{name}: highest {key} meeting the SLO: {value_text(highest)}"
    after = series.rows[[id(r) for r in series.rows].index(id(reach.highest)) + 1:]
    if after:
        line += (f"; at {key}={value_text(results.x_of(after[0]))} it misses "
                 + ", ".join(missed(results, after[0])))
    else:
        line += ", the highest swept value (it may meet it further up)"
    if reach.misses_below:
        line += (" — but it misses at " + ", ".join(
            f"{key}={value_text(results.x_of(row))}" for row in reach.misses_below))
    return line
