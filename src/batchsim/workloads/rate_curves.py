"""Time-varying load: request rate curves and the non-homogeneous Poisson arrivals they drive.

A ``PiecewiseRate`` (a rate per time window, e.g. ServeGen's 600 s windows) is sampled exactly
by time rescaling: if Λ(t) is the integral of the rate, the times Λ⁻¹(E₁) < Λ⁻¹(E₂) < ... of
a unit-rate Poisson process E are a Poisson process with that rate. A smooth curve (the
diurnal sine of ``diurnal.py``) is sampled by thinning: candidates from a piecewise-constant
envelope above it, each kept with probability rate(t) / envelope(t).

Everything draws from the caller's generator in an order fixed by the parameters, so the
arrivals are a pure function of the seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.traces.checks import nonnegative_number_column
from batchsim.workloads.traces.csv_text import read_csv_text, require_columns

RateFunction = Callable[[np.ndarray], np.ndarray]

_MIN_CHUNK = 64


@dataclass(frozen=True, slots=True, eq=False)
class PiecewiseRate:
    """Rate ``rates[i]`` requests/s on [starts_s[i], starts_s[i + 1]); the last rate holds
    forever. ``starts_s[0]`` is 0."""

    starts_s: np.ndarray
    rates: np.ndarray

    def __post_init__(self) -> None:
        starts = np.asarray(self.starts_s, dtype=np.float64)
        rates = np.asarray(self.rates, dtype=np.float64)
        if starts.ndim != 1 or starts.size == 0 or starts.shape != rates.shape:
            raise ValueError("a rate curve needs as many start times as rates, at least one")
        if starts[0] != 0 or np.any(np.diff(starts) <= 0):
            raise ValueError("rate curve times must start at 0 and increase")
        if not np.all(np.isfinite(rates) & (rates >= 0)) or not np.any(rates > 0):
            raise ValueError("rate curve rates must be finite, >= 0 and not all 0")
        object.__setattr__(self, "starts_s", starts)
        object.__setattr__(self, "rates", rates)

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        """The rate in effect at each time ``t`` (>= 0)."""
        return self.rates[np.searchsorted(self.starts_s, t, side="right") - 1]

    def _cumulative_at_starts(self) -> np.ndarray:
        widths = np.diff(self.starts_s)
        return np.concatenate(([0.0], np.cumsum(self.rates[:-1] * widths)))

    def integral(self, t: np.ndarray | float) -> np.ndarray:
        """Λ(t): expected number of arrivals in [0, t)."""
        t = np.asarray(t, dtype=np.float64)
        segment = np.searchsorted(self.starts_s, t, side="right") - 1
        return self._cumulative_at_starts()[segment] + self.rates[segment] * (
            t - self.starts_s[segment])

    def inverse_integral(self, u: np.ndarray) -> np.ndarray:
        """Λ⁻¹(u) for sorted u <= Λ(∞): the time by which u arrivals are expected."""
        cumulative = self._cumulative_at_starts()
        # side="right": a u on a boundary belongs to the next window, so a zero-rate window
        # (flat Λ) is never the one divided by.
        segment = np.searchsorted(cumulative, u, side="right") - 1
        rate = self.rates[segment]
        step = np.divide(u - cumulative[segment], rate, out=np.zeros_like(u), where=rate > 0)
        return self.starts_s[segment] + step

    def scaled(self, *, time_factor: float = 1.0, rate_factor: float = 1.0) -> PiecewiseRate:
        """Times multiplied by ``time_factor`` (0.5: the curve plays twice as fast), rates by
        ``rate_factor``."""
        return PiecewiseRate(self.starts_s * time_factor, self.rates * rate_factor)


def piecewise_arrivals(curve: PiecewiseRate, rng: np.random.Generator, *,
                       duration_s: float | None = None,
                       num_requests: int | None = None) -> np.ndarray:
    """Non-homogeneous Poisson arrivals with rate ``curve``, by time rescaling (exact).

    With ``duration_s`` the count is Poisson(Λ(duration)) and, given the count, the rescaled
    times are sorted uniforms on [0, Λ(duration)); with ``num_requests`` they are the first
    arrivals of a unit-rate process mapped through Λ⁻¹.
    """
    if (duration_s is None) == (num_requests is None):
        raise ValueError("give exactly one of duration_s or num_requests")
    if duration_s is not None:
        total = float(curve.integral(duration_s))
        count = int(rng.poisson(total))
        units = np.sort(rng.uniform(0.0, total, size=count))
        return np.minimum(curve.inverse_integral(units), np.nextafter(duration_s, 0))
    assert num_requests is not None
    units = np.cumsum(rng.exponential(1.0, size=num_requests))
    _check_reachable(curve, units)
    return curve.inverse_integral(units)


def _check_reachable(curve: PiecewiseRate, units: np.ndarray) -> None:
    if curve.rates[-1] > 0 or units.size == 0:
        return
    total = float(curve._cumulative_at_starts()[-1])
    if units[-1] > total:
        raise WorkloadError(
            f"the rate curve is 0 from {curve.starts_s[-1]:g} s on, so it expects only "
            f"~{total:.0f} requests in all (asked for {units.size}; give duration_s, or a "
            "last rate > 0)")


def thinned_arrivals(rate: RateFunction, envelope: PiecewiseRate, rng: np.random.Generator,
                     *, duration_s: float | None = None,
                     num_requests: int | None = None) -> np.ndarray:
    """Non-homogeneous Poisson arrivals with rate ``rate(t) <= envelope(t)``, by thinning.

    Candidates come from the envelope; each is kept with probability rate / envelope. The
    result is exact for any rate bounded by the envelope (Lewis and Shedler, 1979).
    """
    if duration_s is not None and num_requests is None:
        candidates = piecewise_arrivals(envelope, rng, duration_s=duration_s)
        return candidates[_accept(rate, envelope, candidates, rng)]
    if num_requests is None or duration_s is not None:
        raise ValueError("give exactly one of duration_s or num_requests")
    return _first_thinned(rate, envelope, rng, num_requests)


def _accept(rate: RateFunction, envelope: PiecewiseRate, times: np.ndarray,
            rng: np.random.Generator) -> np.ndarray:
    ratio = rate(times) / envelope.rate_at(times)
    if np.any(ratio > 1 + 1e-9):
        raise ValueError("the rate exceeds its thinning envelope")
    return rng.random(times.size) < ratio


def _first_thinned(rate: RateFunction, envelope: PiecewiseRate, rng: np.random.Generator,
                   count: int) -> np.ndarray:
    """The first ``count`` kept arrivals: the unit-rate process is continued chunk by chunk,
    chunk sizes depending only on ``count``, so the result depends only on the seed."""
    kept: list[np.ndarray] = []
    found, unit_time = 0, 0.0
    chunk = max(_MIN_CHUNK, 2 * count)
    while found < count:
        units = unit_time + np.cumsum(rng.exponential(1.0, size=chunk))
        unit_time = float(units[-1])
        _check_reachable(envelope, units)
        times = envelope.inverse_integral(units)
        times = times[_accept(rate, envelope, times, rng)]
        kept.append(times)
        found += times.size
    return np.concatenate(kept)[:count]


def load_rate_curve(path: Path, time_column: str, rate_column: str) -> PiecewiseRate:
    """A rate curve from a CSV: window start times and the rate (requests/s) in each window.

    Times must increase and are rebased so the first window starts at 0 (a slice cut from
    the middle of a longer file plays from its own start). Errors name the file line.
    """
    frame = read_csv_text(path)
    require_columns(frame, path, (time_column, rate_column))
    if frame.empty:
        raise WorkloadError(f"{path}:2: no rows after the header (expected at least one window)")
    starts = nonnegative_number_column(frame, time_column, path)
    rates = nonnegative_number_column(frame, rate_column, path,
                                      "a rate in requests/s, a number >= 0")
    not_increasing = np.diff(starts) <= 0
    if not_increasing.any():
        row = int(np.flatnonzero(not_increasing)[0]) + 1
        raise WorkloadError(f"{path}:{frame.index[row]}: {time_column} {starts[row]:g} does "
                            f"not increase (previous row: {starts[row - 1]:g})")
    if not np.any(rates > 0):
        raise WorkloadError(f"{path}: every {rate_column} is 0 (expected some rate > 0)")
    return PiecewiseRate(starts - starts[0], rates)


def mean_rate_over(curve: PiecewiseRate, end_s: float) -> float:
    """The curve's average rate over [0, end_s)."""
    if not (math.isfinite(end_s) and end_s > 0):
        raise ValueError(f"averaging needs an end time > 0, got {end_s}")
    return float(curve.integral(end_s)) / end_s
