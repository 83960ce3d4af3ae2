"""Confidence intervals over replications: the t critical value and the interval's coverage."""

import itertools

import numpy as np
import pytest

from batchsim.metrics.confidence import aggregate, t_critical, t_interval


def test_t_critical_matches_printed_tables_and_falls_towards_the_normal() -> None:
    # Two-sided 95% values as printed to 3 decimals in statistics tables (e.g. NIST/SEMATECH
    # e-Handbook of Statistical Methods, table 1.3.6.7.2).
    for df, printed in ((1, 12.706), (4, 2.776), (10, 2.228), (30, 2.042), (120, 1.980)):
        assert t_critical(df) == pytest.approx(printed, abs=5e-4)
    values = [t_critical(df) for df in range(1, 500)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert 1.960 < t_critical(499) < 1.980
    with pytest.raises(ValueError, match="two replications"):
        t_critical(0)


def test_t_interval_covers_the_true_mean_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    trials, covered = 4000, 0
    for _ in range(trials):
        samples = rng.normal(10.0, 3.0, size=5).tolist()
        _, low, high = t_interval(samples)
        covered += low <= 10.0 <= high
    # Binomial standard error at p = 0.95 over 4000 trials is 0.0034: allow 3 of them.
    assert covered / trials == pytest.approx(0.95, abs=0.011)


def test_one_replication_has_a_zero_width_interval() -> None:
    assert t_interval([4.0]) == (4.0, 4.0, 4.0)


def test_aggregate_keeps_the_shape_and_marks_missing_numbers() -> None:
    runs = [{"a": 1.0, "d": {"p99": 2.0}, "label": "x", "m": None},
            {"a": 3.0, "d": {"p99": 4.0}, "label": "x", "m": 1.0}]
    means, intervals = aggregate(runs)
    assert means == {"a": 2.0, "d": {"p99": 3.0}, "label": "x", "m": None}
    low, high = intervals["a"]
    assert low < 2.0 < high and high - 2.0 == pytest.approx(t_critical(1) * 1.0)


def test_aggregate_takes_the_union_of_keys_and_marks_absent_ones_missing() -> None:
    means, _ = aggregate([{"b": {"x": 1.0}}, {"a": {"x": 2.0}, "b": {"x": 3.0}}, None])
    assert means == {"b": {"x": None}, "a": {"x": None}}
    means, intervals = aggregate([{"b": {"x": 1.0}}, {"b": {"x": 3.0}}])
    assert means == {"b": {"x": 2.0}} and intervals["b"]["x"][0] < 2.0
