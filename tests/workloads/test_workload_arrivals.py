"""Open-loop arrival processes: rates, burstiness, and the two stopping rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.workloads import constant_arrivals, gamma_arrivals, poisson_arrivals

N = 100_000


def _gaps(times: np.ndarray) -> np.ndarray:
    # Renewal processes start at 0, so the first gap is the first arrival time.
    return np.diff(times, prepend=0.0)


def _cv(values: np.ndarray) -> float:
    return float(values.std() / values.mean())


def test_poisson_gaps_are_exponential_with_mean_one_over_rate() -> None:
    times = poisson_arrivals(np.random.default_rng(1), 10.0, num_requests=N)
    gaps = _gaps(times)
    assert times.dtype == np.float64 and times.size == N
    # Exponential: sd = mean, so the standard error of the mean gap is 0.1 / sqrt(N).
    assert gaps.mean() == pytest.approx(0.1, abs=6 * 0.1 / math.sqrt(N))
    # Sample cv's relative SE ~ sqrt((kurtosis - 1) / N) / 2 = sqrt(8 / N) / 2 ~ 0.45%.
    assert _cv(gaps) == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_gaps_have_the_requested_mean_and_cv(cv: float) -> None:
    times = gamma_arrivals(np.random.default_rng(2), 4.0, cv, num_requests=N)
    gaps = _gaps(times)
    assert gaps.mean() == pytest.approx(0.25, abs=6 * 0.25 * cv / math.sqrt(N))
    # Gamma kurtosis is 3 + 6 cv^2: relative SE of the sample cv is <= 0.8% for cv <= 2.
    assert _cv(gaps) == pytest.approx(cv, rel=0.05)


def test_constant_arrivals_are_exactly_periodic_from_zero() -> None:
    np.testing.assert_array_equal(
        constant_arrivals(4.0, num_requests=5), [0.0, 0.25, 0.5, 0.75, 1.0]
    )
    np.testing.assert_array_equal(constant_arrivals(4.0, duration_s=2.0), np.arange(8) / 4.0)
    # 0.3 s at 10/s: 0.3 itself is excluded even though 3 / 10 is computed in floating point.
    assert constant_arrivals(10.0, duration_s=0.3).tolist() == [0.0, 0.1, 0.2]


def test_stochastic_processes_start_one_gap_after_zero() -> None:
    rng = np.random.default_rng(3)
    assert poisson_arrivals(rng, 1.0, num_requests=1)[0] > 0
    assert gamma_arrivals(rng, 1.0, 2.0, num_requests=1)[0] > 0


def test_duration_count_is_poisson_distributed_around_rate_times_duration() -> None:
    times = poisson_arrivals(np.random.default_rng(4), 50.0, duration_s=2000.0)
    expected = 50.0 * 2000.0
    assert abs(times.size - expected) <= 6 * math.sqrt(expected)
    assert times[-1] < 2000.0


def test_bursty_gamma_over_a_duration_spans_several_chunks_and_stays_valid() -> None:
    # cv 10 gaps are mostly tiny with rare huge ones: the first chunk (expected count plus
    # slack) often ends early, so this exercises drawing further chunks.
    for seed in range(20):
        times = gamma_arrivals(np.random.default_rng(seed), 2.0, 10.0, duration_s=500.0)
        assert np.all(np.diff(times) >= 0)
        assert times.size == 0 or (times[0] > 0 and times[-1] < 500.0)


ARRIVALS = st.sampled_from(["poisson", "gamma", "constant"])


def _arrivals(kind: str, seed: int, rate: float, **stop: float | int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        return poisson_arrivals(rng, rate, **stop)  # type: ignore[arg-type]
    if kind == "gamma":
        return gamma_arrivals(rng, rate, 1.7, **stop)  # type: ignore[arg-type]
    return constant_arrivals(rate, **stop)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    kind=ARRIVALS,
    seed=st.integers(0, 2**32 - 1),
    rate=st.floats(0.01, 1000.0),
    duration_s=st.floats(0.001, 100.0),
)
def test_duration_keeps_exactly_the_arrivals_before_it(
    kind: str, seed: int, rate: float, duration_s: float
) -> None:
    times = _arrivals(kind, seed, rate, duration_s=duration_s)
    assert times.dtype == np.float64
    assert np.all(np.diff(times) >= 0)
    assert np.all((times >= 0) & (times < duration_s))
    np.testing.assert_array_equal(times, _arrivals(kind, seed, rate, duration_s=duration_s))


@settings(max_examples=60, deadline=None)
@given(
    kind=ARRIVALS,
    seed=st.integers(0, 2**32 - 1),
    rate=st.floats(0.01, 1000.0),
    num_requests=st.integers(0, 2000),
)
def test_num_requests_gives_exactly_that_many_sorted_arrivals(
    kind: str, seed: int, rate: float, num_requests: int
) -> None:
    times = _arrivals(kind, seed, rate, num_requests=num_requests)
    assert times.shape == (num_requests,)
    assert np.all(np.diff(times) >= 0)
    np.testing.assert_array_equal(times, _arrivals(kind, seed, rate, num_requests=num_requests))


@pytest.mark.parametrize(
    "call",
    [
        lambda rng: poisson_arrivals(rng, 1.0),
        lambda rng: poisson_arrivals(rng, 1.0, duration_s=1.0, num_requests=1),
        lambda rng: poisson_arrivals(rng, 0.0, num_requests=1),
        lambda rng: poisson_arrivals(rng, -2.0, num_requests=1),
        lambda rng: poisson_arrivals(rng, math.nan, num_requests=1),
        lambda rng: poisson_arrivals(rng, 1.0, duration_s=0.0),
        lambda rng: poisson_arrivals(rng, 1.0, num_requests=-1),
        lambda rng: gamma_arrivals(rng, 1.0, 0.0, num_requests=1),
        lambda rng: constant_arrivals(0.0, num_requests=1),
        lambda rng: constant_arrivals(1.0),
    ],
)
def test_bad_parameters_raise_value_error(call: object) -> None:
    with pytest.raises(ValueError):
        call(np.random.default_rng(0))  # type: ignore[operator]
