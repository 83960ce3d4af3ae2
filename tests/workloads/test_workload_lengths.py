"""Token-length distributions: right moments, valid values, reproducible draws.

Tolerances are a few standard errors of the estimator for the sample size used, so a correct
implementation fails with negligible probability (and seeds are fixed anyway).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.workloads import (
    EmpiricalLength,
    FixedLength,
    GeometricLength,
    LengthDistribution,
    LognormalLength,
    MixtureLength,
    UniformLength,
    WorkloadError,
    load_empirical_column,
)

N = 200_000


def _draw(dist: LengthDistribution, n: int = N, seed: int = 7) -> np.ndarray:
    values = dist.sample(np.random.default_rng(seed), n)
    assert values.dtype == np.int64
    assert values.shape == (n,)
    assert values.min() >= 1
    return values


def _assert_mean_close(values: np.ndarray, expected: float) -> None:
    standard_error = values.std() / math.sqrt(values.size)
    assert abs(values.mean() - expected) <= 6 * standard_error + 1e-12


def _cv(values: np.ndarray) -> float:
    return float(values.std() / values.mean())


def test_fixed_length_is_constant() -> None:
    values = _draw(FixedLength(128))
    assert np.all(values == 128)
    assert FixedLength(128).mean() == 128.0


def test_uniform_length_covers_both_ends_with_the_right_moments() -> None:
    dist = UniformLength(10, 20)
    values = _draw(dist)
    assert values.min() == 10 and values.max() == 20
    assert dist.mean() == 15.0
    _assert_mean_close(values, 15.0)
    # Discrete uniform on k = 11 points: variance (k^2 - 1) / 12.
    assert values.var() == pytest.approx((11**2 - 1) / 12, rel=0.02)


@pytest.mark.parametrize(("mean", "cv"), [(1024.0, 1.0), (200.0, 0.5), (64.0, 2.0)])
def test_lognormal_matches_requested_mean_and_cv(mean: float, cv: float) -> None:
    dist = LognormalLength(mean, cv)
    values = _draw(dist)
    assert dist.mean() == mean
    _assert_mean_close(values, mean)
    # The sample cv's relative standard error is about sqrt((kurtosis - 1) / n) / 2: ~0.7%
    # at cv 1 and ~4% at cv 2 (lognormal kurtosis grows fast), so allow 5 and 15%.
    assert _cv(values) == pytest.approx(cv, rel=0.05 if cv <= 1 else 0.15)


def test_lognormal_with_zero_cv_is_the_mean_rounded() -> None:
    assert np.all(_draw(LognormalLength(99.6, 0.0), n=100) == 100)


def test_lognormal_never_draws_below_one() -> None:
    assert _draw(LognormalLength(1.0, 3.0)).min() == 1


@pytest.mark.parametrize("mean", [1.0, 2.5, 50.0])
def test_geometric_has_the_requested_mean_and_exponential_like_spread(mean: float) -> None:
    dist = GeometricLength(mean)
    values = _draw(dist)
    _assert_mean_close(values, mean)
    # Geometric on 1, 2, ... with p = 1/mean has variance (1 - p) / p^2, so cv = sqrt(1 - p).
    assert _cv(values) == pytest.approx(math.sqrt(1 - 1 / mean), abs=0.01)


def test_empirical_resamples_the_given_values() -> None:
    observed = np.array([3, 3, 7, 100, 12])
    dist = EmpiricalLength(observed)
    values = _draw(dist)
    assert set(np.unique(values)) <= {3, 7, 12, 100}
    assert dist.mean() == observed.mean()
    _assert_mean_close(values, observed.mean())
    assert np.mean(values == 3) == pytest.approx(0.4, abs=6 * math.sqrt(0.24 / N))


def test_empirical_keeps_a_private_read_only_copy() -> None:
    observed = np.array([5, 6, 7])
    dist = EmpiricalLength(observed)
    observed[0] = 1000
    assert dist.values.tolist() == [5, 6, 7]
    with pytest.raises(ValueError):
        dist.values[0] = 1


def test_mixture_respects_weights_and_normalises_them() -> None:
    short, long = FixedLength(10), FixedLength(5000)
    dist = MixtureLength((short, long), (9.0, 1.0))
    assert dist.weights == pytest.approx((0.9, 0.1))
    assert dist.mean() == pytest.approx(0.9 * 10 + 0.1 * 5000)
    values = _draw(dist)
    assert set(np.unique(values)) == {10, 5000}
    long_share = np.mean(values == 5000)
    assert long_share == pytest.approx(0.1, abs=6 * math.sqrt(0.1 * 0.9 / N))


def test_mixture_of_continuous_components_has_the_mixed_mean() -> None:
    dist = MixtureLength((LognormalLength(100, 0.5), UniformLength(1000, 2000)), (0.7, 0.3))
    values = _draw(dist)
    assert dist.mean() == pytest.approx(0.7 * 100 + 0.3 * 1500)
    _assert_mean_close(values, dist.mean())


DISTRIBUTIONS: list[LengthDistribution] = [
    FixedLength(3),
    UniformLength(1, 4096),
    LognormalLength(512, 1.5),
    GeometricLength(40),
    EmpiricalLength(np.array([1, 2, 900])),
    MixtureLength((LognormalLength(50, 1), GeometricLength(700)), (0.8, 0.2)),
]


@settings(max_examples=40, deadline=None)
@given(
    index=st.integers(0, len(DISTRIBUTIONS) - 1),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 300),
)
def test_same_seed_gives_identical_valid_draws(index: int, seed: int, n: int) -> None:
    dist = DISTRIBUTIONS[index]
    first = dist.sample(np.random.default_rng(seed), n)
    second = dist.sample(np.random.default_rng(seed), n)
    np.testing.assert_array_equal(first, second)
    assert first.dtype == np.int64 and first.shape == (n,)
    assert n == 0 or first.min() >= 1


def test_every_distribution_satisfies_the_protocol() -> None:
    assert all(isinstance(dist, LengthDistribution) for dist in DISTRIBUTIONS)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedLength(0),
        lambda: UniformLength(0, 5),
        lambda: UniformLength(6, 5),
        lambda: LognormalLength(0.5, 1.0),
        lambda: LognormalLength(100, -1.0),
        lambda: GeometricLength(0.9),
        lambda: EmpiricalLength(np.array([], dtype=np.int64)),
        lambda: EmpiricalLength(np.array([1, 0])),
        lambda: EmpiricalLength(np.array([1.5])),
        lambda: MixtureLength((), ()),
        lambda: MixtureLength((FixedLength(1),), (1.0, 2.0)),
        lambda: MixtureLength((FixedLength(1),), (0.0,)),
        lambda: MixtureLength((FixedLength(1), FixedLength(2)), (1.0, -0.5)),
    ],
)
def test_invalid_parameters_are_rejected(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_load_empirical_column_reads_positive_integers(tmp_path: Path) -> None:
    csv = tmp_path / "lengths.csv"
    csv.write_text("num_prefill_tokens,num_decode_tokens\n74,918\n290,905\n")
    values = load_empirical_column(csv, "num_decode_tokens")
    assert values.dtype == np.int64
    assert values.tolist() == [918, 905]


def test_load_empirical_column_names_a_missing_column_and_the_available_ones(
    tmp_path: Path,
) -> None:
    csv = tmp_path / "lengths.csv"
    csv.write_text("num_prefill_tokens,num_decode_tokens\n74,918\n")
    with pytest.raises(WorkloadError) as info:
        load_empirical_column(csv, "output")
    message = str(info.value)
    assert "lengths.csv" in message and "'output'" in message
    assert "num_prefill_tokens, num_decode_tokens" in message


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        ("n\n5\n6\nabc\n", 4, "'abc' is not a number"),
        ("n\n5\n-6\n", 3, "'-6' is negative"),
        ("n\n5\n0\n", 3, "is 0"),
        ("n\n5\n2.5\n", 3, "'2.5' is not a whole number"),
        ("n\n5\n\n\n7\n\n", 0, ""),  # blank lines are skipped, not errors
    ],
)
def test_load_empirical_column_names_the_line_of_a_bad_value(
    tmp_path: Path, body: str, line: int, fragment: str
) -> None:
    csv = tmp_path / "counts.csv"
    csv.write_text(body)
    if not line:
        assert load_empirical_column(csv, "n").tolist() == [5, 7]
        return
    with pytest.raises(WorkloadError) as info:
        load_empirical_column(csv, "n")
    assert f"counts.csv:{line}: " in str(info.value)
    assert fragment in str(info.value)


def test_load_empirical_column_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"nope\.csv"):
        load_empirical_column(tmp_path / "nope.csv", "n")
