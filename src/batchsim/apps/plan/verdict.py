"""Does a configuration meet the SLO? The rule the whole plan rests on.

A configuration meets the SLO when, for every target given:
- the p99 over its measured requests is at most the target, where a rejected request counts
  as a miss of every target (an infinite latency), so that more than ~1% rejections fail;
- with replications, the *upper end* of the 95% t-interval of that p99 over replications is
  at most the target (a configuration that meets it only on average does not meet it);
and when every replication kept up with its load: no growing queue, i.e. the mean TTFT of the
last third of the measured arrivals did not exceed that of the first third by more than
`ttft_growth_slack_s` *and* at more than `max_ttft_growth_per_s` seconds per second of
arrivals (above capacity, TTFT grows by about load / capacity − 1 seconds per second). An
open-loop run above capacity still ends (it stops arriving, then drains), and on a short run
its percentiles can look fine; the trend cannot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from batchsim.apps.plan.durations import latency_text
from batchsim.apps.plan.runs import RunStats
from batchsim.experiment.schema import PlanKeepUpConfig, SLOConfig
from batchsim.metrics.confidence import t_interval

_TARGETS = (("ttft_p99_s", "ttft_s", "TTFT"), ("tpot_p99_s", "tpot_s", "TPOT"),
            ("e2e_p99_s", "e2e_s", "E2E"))


@dataclass(frozen=True, slots=True)
class Verdict:
    meets: bool
    reasons: list[str]  # why it misses, in words (empty when it meets)
    missed: list[str]  # the same, short: "TTFT", "TPOT", "E2E", "rejections", "queue"
    p99: dict[str, dict[str, float | None]]  # per target: mean, upper (the judged value)
    kept_up: list[bool] = field(default_factory=list)  # per replication


def slo_targets(slo: SLOConfig) -> list[tuple[str, str, str, float]]:
    """(key, requests column, label, target) of every target given."""
    return [(key, column, label, getattr(slo, key)) for key, column, label in _TARGETS
            if getattr(slo, key) is not None]


def judged_on(replications: int) -> str:
    """How sure each verdict is, in words, for the plan's outputs."""
    if replications == 1:
        return ("judged on one run per configuration, so no verdict carries a confidence "
                "interval (replications: 3 or more give each one)")
    return f"judged on the upper end of the 95% interval over {replications} replications"


def _judged_p99(samples: list[float | None]) -> tuple[float | None, float | None]:
    """(mean, judged value) of a p99 over replications: the mean with one replication, the
    upper end of the 95% interval with several; infinite if any replication's is."""
    if any(s is None for s in samples):
        return None, None
    values = [float(s) for s in samples if s is not None]
    if any(math.isinf(v) for v in values):
        return math.inf, math.inf
    mean, _, high = t_interval(values)
    return mean, high


def _latency(seconds: float) -> str:
    """A latency beside its target, with the decimals that can matter near a bound
    (100.4 ms > 100 ms, 2.004 s > 2 s); waits of a minute or more in minutes or hours."""
    if seconds >= 60.0:
        return latency_text(seconds)
    if seconds >= 10.0:
        return f"{seconds:,.1f} s".replace(".0 s", " s")
    if seconds >= 1.0:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + " s"
    return f"{seconds * 1000:,.1f} ms".replace(".0 ms", " ms")


def kept_up(run: RunStats, keep_up: PlanKeepUpConfig) -> bool:
    """No growing queue: TTFT grew by at most the slack, or no faster than the allowed rate."""
    trend = run.ttft_trend
    if trend is None:
        return True  # too few finished requests to see a trend; the p99s judge them
    return (trend.growth_s <= keep_up.ttft_growth_slack_s
            or trend.growth_per_s <= keep_up.max_ttft_growth_per_s)


def judge(runs: list[RunStats], slo: SLOConfig, keep_up: PlanKeepUpConfig) -> Verdict:
    reasons: list[str] = []
    missed: list[str] = []
    p99: dict[str, dict[str, float | None]] = {}
    for key, column, label, target in slo_targets(slo):
        mean, judged = _judged_p99([run.p99[column] for run in runs])
        p99[key] = {"mean": mean, "judged": judged, "target": target}
        if judged is None:
            reasons.append(f"{label}: no measured request")
        elif math.isinf(judged):
            reasons.append(f"p99 {label}: over 1% of requests rejected")
            label = "rejections"
        elif judged > target:
            what = "upper 95% bound" if len(runs) > 1 else "p99"
            reasons.append(f"{label} {what} {_latency(judged)} > {_latency(target)}")
        else:
            continue
        if label not in missed:
            missed.append(label)
    kept = [kept_up(run, keep_up) for run in runs]
    growing = [run.ttft_trend for run, ok in zip(runs, kept, strict=True) if not ok]
    if growing:
        worst = max(growing, key=lambda trend: trend.growth_per_s if trend else 0.0)
        assert worst is not None
        reasons.append(f"queue growing: mean TTFT {latency_text(worst.early_ttft_s)} early, "
                       f"{latency_text(worst.late_ttft_s)} late "
                       f"(+{worst.growth_per_s:.2f} s/s)")
        missed.append("queue")
    return Verdict(not reasons, reasons, missed, p99, kept)


def mean_metrics(runs: list[RunStats]) -> tuple[Any, Any]:
    """The runs' summary metrics: means and 95% intervals over replications."""
    from batchsim.metrics.confidence import aggregate

    means, intervals = aggregate([run.metrics for run in runs])
    return means, (intervals if len(runs) > 1 else None)
