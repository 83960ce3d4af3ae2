"""Time-varying load: rate curves (time rescaling), diurnal sine with bursts (thinning), and
Weibull / gamma renewal arrivals with a target coefficient of variation.

Counts are checked against the curve's integral: a Poisson count with mean m has standard
deviation sqrt(m), so each window must land within 4.5 sigma and the windows together must
pass a chi-square test at the 0.1% level. Seeds are fixed, so these never flake.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from batchsim.workloads import WorkloadError, resolve_trace_path
from batchsim.workloads.arrivals import gamma_arrivals
from batchsim.workloads.diurnal import Burst, DiurnalRate, diurnal_arrivals
from batchsim.workloads.rate_curves import (
    PiecewiseRate,
    load_rate_curve,
    mean_rate_over,
    piecewise_arrivals,
)
from batchsim.workloads.weibull import weibull_arrivals, weibull_shape_for_cv

# Upper 0.1% points of chi-square with k degrees of freedom, for the few k used here.
CHI2_999 = {10: 29.59, 11: 31.26, 12: 32.91, 23: 49.73, 24: 51.18}

CURVE = PiecewiseRate(np.arange(12) * 50.0,
                      np.array([1, 5, 0, 10, 2, 0.5, 8, 3, 0, 6, 4, 7], dtype=np.float64))


def _counts(times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.histogram(times, bins=edges)[0]


def _assert_poisson_counts(observed: np.ndarray, expected: np.ndarray) -> None:
    assert np.all(observed[expected == 0] == 0)
    positive = expected > 0
    obs, exp = observed[positive], expected[positive]
    assert np.all(np.abs(obs - exp) <= 4.5 * np.sqrt(exp)), (obs, exp)
    chi2 = float(np.sum((obs - exp) ** 2 / exp))
    assert chi2 < CHI2_999[int(positive.sum())], chi2


def test_rate_curve_counts_per_window_match_its_integral() -> None:
    edges = np.append(CURVE.starts_s, 600.0)
    times = piecewise_arrivals(CURVE, np.random.default_rng(11), duration_s=600.0)
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < 600
    expected = np.diff(CURVE.integral(edges))
    np.testing.assert_allclose(expected, CURVE.rates * 50.0)
    _assert_poisson_counts(_counts(times, edges), expected)


def test_rate_curve_fit_averaged_over_seeds_is_within_one_percent() -> None:
    edges = np.append(CURVE.starts_s, 600.0)
    expected = CURVE.rates * 50.0
    total = sum(_counts(piecewise_arrivals(CURVE, np.random.default_rng(seed),
                                           duration_s=600.0), edges) for seed in range(40))
    positive = expected > 0
    relative = total[positive] / (40 * expected[positive]) - 1
    # 40 runs: sigma of the relative error is 1 / sqrt(40 * expected) <= 2.2% (rate 0.5).
    assert np.all(np.abs(relative) < 4.5 / np.sqrt(40 * expected[positive]))
    assert abs(total.sum() / (40 * expected.sum()) - 1) < 0.01


def test_rate_curve_by_count_follows_the_inverse_integral() -> None:
    times = piecewise_arrivals(CURVE, np.random.default_rng(5), num_requests=2000)
    assert times.size == 2000 and np.all(np.diff(times) >= 0)
    # The n-th arrival of a unit-rate process is Gamma(n, 1): Λ(t_n) = n within ~4.5 sqrt(n).
    assert abs(float(CURVE.integral(times[-1])) - 2000) < 4.5 * math.sqrt(2000)
    assert not np.any((times >= 100) & (times < 150))  # a zero-rate window stays empty


def test_rate_curve_is_a_pure_function_of_the_seed() -> None:
    first = piecewise_arrivals(CURVE, np.random.default_rng(9), duration_s=300.0)
    np.testing.assert_array_equal(first, piecewise_arrivals(CURVE, np.random.default_rng(9),
                                                            duration_s=300.0))
    assert not np.array_equal(first, piecewise_arrivals(CURVE, np.random.default_rng(10),
                                                        duration_s=300.0))


def test_a_curve_that_ends_at_zero_cannot_supply_unlimited_requests() -> None:
    curve = PiecewiseRate(np.array([0.0, 10.0]), np.array([2.0, 0.0]))
    with pytest.raises(WorkloadError, match=r"0 from 10 s on, so it expects only ~20"):
        piecewise_arrivals(curve, np.random.default_rng(1), num_requests=100)


def test_servegen_slice_loads_as_a_two_day_curve() -> None:
    path = resolve_trace_path("servegen-rate", Path("."))
    curve = load_rate_curve(path, "window_start_s", "m-large")
    assert curve.starts_s.size == 288 and curve.starts_s[-1] == 287 * 600
    assert curve.rates[0] == pytest.approx(212.78)
    # A day in 864 s, rescaled to a mean of 2 req/s over it: the count hits the integral.
    fast = curve.scaled(time_factor=0.01)
    fast = fast.scaled(rate_factor=2.0 / mean_rate_over(fast, 864.0))
    assert mean_rate_over(fast, 864.0) == pytest.approx(2.0)
    edges = np.linspace(0, 864.0, 25)
    times = piecewise_arrivals(fast, np.random.default_rng(2), duration_s=864.0)
    _assert_poisson_counts(_counts(times, edges), np.diff(fast.integral(edges)))


@pytest.mark.parametrize(("rows", "line", "fragment"), [
    ("0,1\n600,2\n600,3\n", 4, "window_start_s 600 does not increase (previous row: 600)"),
    ("0,1\n600,\n", 3, "missing rate (expected a rate in requests/s"),
    ("0,1\n600,-2\n", 3, "rate '-2' is not a number >= 0"),
    ("0,1\nsoon,2\n", 3, "window_start_s 'soon' is not a number >= 0"),
])
def test_rate_curve_csv_errors_name_the_line(tmp_path: Path, rows: str, line: int,
                                             fragment: str) -> None:
    path = tmp_path / "curve.csv"
    path.write_text("window_start_s,rate\n" + rows)
    with pytest.raises(WorkloadError) as info:
        load_rate_curve(path, "window_start_s", "rate")
    assert f"curve.csv:{line}: " in str(info.value) and fragment in str(info.value)


def test_rate_curve_csv_column_must_exist(tmp_path: Path) -> None:
    path = tmp_path / "curve.csv"
    path.write_text("window_start_s,rate\n0,1\n")
    with pytest.raises(WorkloadError, match=r"curve\.csv:1: missing column 'm-large'"):
        load_rate_curve(path, "window_start_s", "m-large")


def _sine_integral(rate: DiurnalRate, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w = 2 * np.pi / rate.period_s
    cos = np.cos(w * (a - rate.phase_s)) - np.cos(w * (b - rate.phase_s))
    return rate.mean_rate * ((b - a) + rate.amplitude * cos / w)


def test_diurnal_counts_follow_the_sine() -> None:
    rate = DiurnalRate(mean_rate=20.0, amplitude=0.8, period_s=240.0, phase_s=30.0)
    edges = np.linspace(0, 480.0, 25)
    times = diurnal_arrivals(rate, np.random.default_rng(4), duration_s=480.0)
    _assert_poisson_counts(_counts(times, edges), _sine_integral(rate, edges[:-1], edges[1:]))


def test_diurnal_bursts_multiply_the_rate_inside_them() -> None:
    burst = Burst(start_s=100.0, duration_s=20.0, factor=5.0)
    rate = DiurnalRate(mean_rate=10.0, amplitude=0.5, period_s=400.0, bursts=(burst,))
    # Windows whose edges include the burst's, so each window is inside or outside it.
    edges = np.array([0.0, 50, 100, 110, 120, 170, 220, 300, 400])
    expected = _sine_integral(rate, edges[:-1], edges[1:])
    expected[2:4] *= 5.0
    counts = np.zeros(8)
    for seed in range(10):
        counts += _counts(diurnal_arrivals(rate, np.random.default_rng(seed),
                                           duration_s=400.0), edges)
    assert np.all(np.abs(counts - 10 * expected) <= 4.5 * np.sqrt(10 * expected))


def test_diurnal_by_count_is_seeded_and_sorted() -> None:
    rate = DiurnalRate(mean_rate=5.0, amplitude=1.0, period_s=60.0)
    first = diurnal_arrivals(rate, np.random.default_rng(8), num_requests=777)
    assert first.size == 777 and np.all(np.diff(first) >= 0)
    np.testing.assert_array_equal(first, diurnal_arrivals(rate, np.random.default_rng(8),
                                                          num_requests=777))
    # At amplitude 1 the rate touches 0 once a period; ~777 requests take ~777 / 5 s.
    assert first[-1] == pytest.approx(777 / 5.0, rel=0.15)


def _gaps(times: np.ndarray) -> np.ndarray:
    return np.diff(times, prepend=0.0)


@pytest.mark.parametrize(("cv", "tolerance"), [(0.5, 0.03), (1.0, 0.03), (2.0, 0.05),
                                               (4.0, 0.15)])
def test_weibull_gaps_hit_the_target_mean_and_cv(cv: float, tolerance: float) -> None:
    # Tolerances are ~4 sigma of the sample cv at n = 100k (measured over 20 seeds: 0.3%,
    # 0.4%, 0.9% and 3%); the mean gap's sigma is cv / (rate sqrt(n)).
    gaps = _gaps(weibull_arrivals(np.random.default_rng(12), 4.0, cv, num_requests=100_000))
    assert gaps.mean() == pytest.approx(0.25, abs=5 * 0.25 * cv / math.sqrt(100_000))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=tolerance)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_gaps_hit_the_target_cv(cv: float) -> None:
    gaps = _gaps(gamma_arrivals(np.random.default_rng(13), 4.0, cv, num_requests=100_000))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_weibull_shape_for_cv_inverts_the_moment_formula() -> None:
    assert weibull_shape_for_cv(1.0) == pytest.approx(1.0, rel=1e-9)  # exponential
    for cv in (0.01, 0.3, 2.0, 30.0):
        k = weibull_shape_for_cv(cv)
        implied = math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1)
        assert implied == pytest.approx(cv, rel=1e-9)
    with pytest.raises(ValueError, match=r"between 0\.001 and 1000"):
        weibull_shape_for_cv(0.0)


def test_weibull_by_duration_is_seeded() -> None:
    first = weibull_arrivals(np.random.default_rng(3), 2.0, 1.5, duration_s=500.0)
    assert first[-1] < 500 and abs(first.size - 1000) < 4.5 * 1.5 * math.sqrt(1000)
    np.testing.assert_array_equal(first, weibull_arrivals(np.random.default_rng(3), 2.0, 1.5,
                                                          duration_s=500.0))
