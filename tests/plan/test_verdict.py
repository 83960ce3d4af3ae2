"""The rule a configuration is judged by: p99 with rejected requests as misses, the upper end
of the 95% interval with replications, and no growing queue."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchsim.apps.plan.runs import RunStats, TtftTrend, p99_counting_misses
from batchsim.apps.plan.verdict import judge
from batchsim.experiment.schema import PlanKeepUpConfig, SLOConfig

SLO = SLOConfig(ttft_p99_s=1.0)
KEEP_UP = PlanKeepUpConfig()


def _run(ttft_p99: float, trend: TtftTrend | None = None) -> RunStats:
    return RunStats(metrics={}, p99={"ttft_s": ttft_p99, "tpot_s": None, "e2e_s": None},
                    measured=100, rejected=0, ttft_trend=trend, served_output_tps=None)


def test_p99_is_numpys_without_rejections() -> None:
    values = np.random.default_rng(1).exponential(1.0, 1000)
    assert p99_counting_misses(values) == pytest.approx(float(np.percentile(values, 99)))


def test_rejections_beyond_one_percent_make_the_p99_infinite() -> None:
    values = np.linspace(0.1, 0.5, 1000)
    one = values.copy()
    one[0] = math.inf  # one rejection in 1000 stays below the p99
    assert math.isfinite(p99_counting_misses(one) or math.inf)
    many = values.copy()
    many[:11] = math.inf  # 1.1% rejected
    assert p99_counting_misses(many) == math.inf


def test_with_replications_the_upper_end_of_the_interval_is_judged() -> None:
    runs = [_run(p) for p in (0.7, 0.9, 1.05)]  # mean 0.88 < 1 s, upper bound above
    verdict = judge(runs, SLO, KEEP_UP)
    assert not verdict.meets and verdict.missed == ["TTFT"]
    assert verdict.p99["ttft_p99_s"]["mean"] == pytest.approx(0.8833, abs=1e-3)
    assert verdict.p99["ttft_p99_s"]["judged"] > 1.0
    assert judge([_run(p) for p in (0.80, 0.82, 0.81)], SLO, KEEP_UP).meets


def test_an_infinite_p99_in_any_replication_misses_as_rejections() -> None:
    verdict = judge([_run(0.2), _run(math.inf)], SLO, KEEP_UP)
    assert verdict.missed == ["rejections"]


def test_a_growing_queue_misses_even_with_every_percentile_under_target() -> None:
    growing = TtftTrend(early_arrival_s=10.0, early_ttft_s=0.1, late_arrival_s=50.0,
                        late_ttft_s=0.9)  # +0.02 s per s of arrivals: under 0.05
    assert judge([_run(0.95, growing)], SLO, KEEP_UP).meets
    fast = TtftTrend(10.0, 0.1, 20.0, 0.9)  # +0.08 s per s of arrivals: overloaded
    verdict = judge([_run(0.95, fast)], SLO, KEEP_UP)
    assert verdict.missed == ["queue"] and verdict.kept_up == [False]
    small = TtftTrend(10.0, 0.01, 10.5, 0.08)  # fast but within the slack: noise
    assert judge([_run(0.5, small)], SLO, KEEP_UP).meets
