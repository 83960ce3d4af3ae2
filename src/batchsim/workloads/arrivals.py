"""Open-loop arrival processes: absolute request arrival times in seconds.

Open loop means arrivals do not wait for the server, which is what exposes queueing and
overload. Each function returns a sorted float64 array; the caller picks exactly one stopping
rule: a time horizon (``duration_s``, keep arrivals with t < duration_s) or a request count
(``num_requests``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# Draws n inter-arrival gaps; the stochastic processes differ only in this.
GapSampler = Callable[[int], np.ndarray]

_MIN_CHUNK = 64


def poisson_arrivals(
    rng: np.random.Generator,
    rate: float,
    *,
    duration_s: float | None = None,
    num_requests: int | None = None,
) -> np.ndarray:
    """Poisson process: exponential gaps with mean 1/rate; the first arrival is one gap in."""
    _check_rate(rate)
    scale = 1.0 / rate
    return _renewal_arrivals(
        lambda n: rng.exponential(scale, size=n), rate, duration_s, num_requests
    )


def gamma_arrivals(
    rng: np.random.Generator,
    rate: float,
    cv: float,
    *,
    duration_s: float | None = None,
    num_requests: int | None = None,
) -> np.ndarray:
    """Gamma renewal process: gaps with mean 1/rate and coefficient of variation ``cv``.

    cv > 1 is burstier than Poisson (clusters and lulls), cv < 1 more regular, cv = 1 is
    Poisson. A gamma with shape k has cv = 1/sqrt(k), hence shape = 1/cv^2.
    """
    _check_rate(rate)
    if not (math.isfinite(cv) and cv > 0):
        raise ValueError(f"gamma arrival cv must be > 0, got {cv}")
    shape = 1.0 / cv**2
    scale = 1.0 / (rate * shape)
    return _renewal_arrivals(
        lambda n: rng.gamma(shape, scale, size=n), rate, duration_s, num_requests
    )


def constant_arrivals(
    rate: float,
    *,
    duration_s: float | None = None,
    num_requests: int | None = None,
) -> np.ndarray:
    """One arrival every 1/rate seconds, the first at t = 0."""
    _check_rate(rate)
    count = _check_stop(duration_s, num_requests)
    if count is None:
        assert duration_s is not None
        # ceil(duration * rate) candidates cover [0, duration); one spare absorbs float
        # rounding of the product, and the filter below drops any candidate past the end.
        count = math.ceil(duration_s * rate) + 1
        # Multiply index by the period rather than summing gaps: no accumulated error.
        times = np.arange(count, dtype=np.float64) / rate
        return times[times < duration_s]
    return np.arange(count, dtype=np.float64) / rate


def _check_rate(rate: float) -> None:
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate}")


def _check_stop(duration_s: float | None, num_requests: int | None) -> int | None:
    """Validate the stopping rule; return the request count, or None for a time horizon."""
    if (duration_s is None) == (num_requests is None):
        raise ValueError("give exactly one of duration_s or num_requests")
    if num_requests is not None:
        if num_requests < 0:
            raise ValueError(f"num_requests must be >= 0, got {num_requests}")
        return int(num_requests)
    assert duration_s is not None
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    return None


def _renewal_arrivals(
    gaps: GapSampler, rate: float, duration_s: float | None, num_requests: int | None
) -> np.ndarray:
    count = _check_stop(duration_s, num_requests)
    if count is not None:
        return np.cumsum(gaps(count), dtype=np.float64)
    assert duration_s is not None
    return _arrivals_until(gaps, rate, duration_s)


def _arrivals_until(gaps: GapSampler, rate: float, duration_s: float) -> np.ndarray:
    """All arrivals before ``duration_s``, drawing gaps in vectorised chunks.

    The first chunk is sized to the expected count plus a few standard deviations, so it
    almost always suffices; bursty processes may need more. Chunk sizes depend only on the
    parameters, so the result is still a pure function of the generator's seed.
    """
    expected = rate * duration_s
    chunk = max(_MIN_CHUNK, math.ceil(expected + 4 * math.sqrt(expected)))
    pieces: list[np.ndarray] = []
    elapsed = 0.0
    while elapsed < duration_s:
        times = elapsed + np.cumsum(gaps(chunk), dtype=np.float64)
        pieces.append(times)
        elapsed = float(times[-1])
    arrivals = np.concatenate(pieces)
    # Arrivals are sorted, so the cut is a binary search rather than a mask.
    return arrivals[: np.searchsorted(arrivals, duration_s, side="left")]
