"""Bisection bookkeeping against an oracle: the answer is the last load of the grid before
the first that misses, found in log2 steps, and the edge cases say what they are."""

from __future__ import annotations

import pytest

from batchsim.apps.plan.bisect import FOUND, MEETS_AT_HIGH, MISSES_AT_LOW, RateBisection


def _run(bisection: RateBisection, capacity: float) -> RateBisection:
    while loads := bisection.next_loads():
        for load in loads:
            bisection.record(load, load <= capacity)
    return bisection


@pytest.mark.parametrize("capacity", [2.0, 3.7, 9.0, 12.5, 17.9])
def test_the_answer_is_the_largest_grid_load_that_meets(capacity: float) -> None:
    bisection = _run(RateBisection(2.0, 18.0, 1.0), capacity)
    grid = [2.0 + k for k in range(17)]
    assert bisection.status == FOUND
    assert bisection.answer == max(load for load in grid if load <= capacity)
    assert bisection.failing is not None and bisection.answer is not None
    assert bisection.failing - bisection.answer == 1.0  # within the tolerance
    assert len(bisection.steps) == 2 + 4  # both ends, then log2(16) midpoints


def test_low_that_misses_has_no_answer_and_high_that_meets_is_a_lower_bound() -> None:
    assert _run(RateBisection(2.0, 18.0, 1.0), 1.0).status == MISSES_AT_LOW
    assert _run(RateBisection(2.0, 18.0, 1.0), 1.0).answer is None
    above = _run(RateBisection(2.0, 18.0, 1.0), 50.0)
    assert (above.status, above.answer, len(above.steps)) == (MEETS_AT_HIGH, 18.0, 2)


def test_midpoints_of_a_bracket_that_does_not_halve_evenly_stop_within_tolerance() -> None:
    bisection = _run(RateBisection(1.0, 10.0, 0.3), 4.2)
    assert bisection.answer is not None and bisection.failing is not None
    assert bisection.answer <= 4.2 < bisection.failing
    assert bisection.failing - bisection.answer <= 0.3
