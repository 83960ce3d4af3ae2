"""A diurnal (sine) request rate with optional bursts, sampled by thinning.

rate(t) = mean_rate × (1 + amplitude × sin(2π (t − phase_s) / period_s)) × the factor of every
burst active at t. The thinning envelope is mean_rate × (1 + amplitude) times the same burst
factors, piecewise constant between burst edges, so bursts cost no rejected candidates
beyond those of the sine itself (at most half of them, since amplitude <= 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchsim.workloads.rate_curves import PiecewiseRate, thinned_arrivals


@dataclass(frozen=True, slots=True)
class Burst:
    """The rate is multiplied by ``factor`` during [start_s, start_s + duration_s)."""

    start_s: float
    duration_s: float
    factor: float

    def __post_init__(self) -> None:
        if not (self.start_s >= 0 and self.duration_s > 0 and self.factor > 0):
            raise ValueError(f"a burst needs start >= 0, duration > 0, factor > 0: {self}")


@dataclass(frozen=True, slots=True)
class DiurnalRate:
    """A sine around ``mean_rate`` with relative ``amplitude`` in [0, 1], times bursts."""

    mean_rate: float
    amplitude: float
    period_s: float
    phase_s: float = 0.0
    bursts: tuple[Burst, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean_rate) and self.mean_rate > 0):
            raise ValueError(f"diurnal mean rate must be > 0, got {self.mean_rate}")
        if not 0 <= self.amplitude <= 1:
            raise ValueError(f"diurnal amplitude must be in [0, 1], got {self.amplitude}")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ValueError(f"diurnal period must be > 0, got {self.period_s}")

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        angle = 2 * np.pi * (t - self.phase_s) / self.period_s
        return self.mean_rate * (1 + self.amplitude * np.sin(angle)) * self._burst_factor(t)

    def _burst_factor(self, t: np.ndarray) -> np.ndarray:
        factor = np.ones_like(t)
        for burst in self.bursts:
            inside = (t >= burst.start_s) & (t < burst.start_s + burst.duration_s)
            factor[inside] *= burst.factor
        return factor

    def envelope(self) -> PiecewiseRate:
        """mean × (1 + amplitude) × burst factors: constant between burst edges."""
        edges = {0.0}
        for burst in self.bursts:
            edges.update((burst.start_s, burst.start_s + burst.duration_s))
        starts = np.array(sorted(edges))
        peak = self.mean_rate * (1 + self.amplitude)
        return PiecewiseRate(starts, peak * self._burst_factor(starts))


def diurnal_arrivals(rate: DiurnalRate, rng: np.random.Generator, *,
                     duration_s: float | None = None,
                     num_requests: int | None = None) -> np.ndarray:
    """Non-homogeneous Poisson arrivals following ``rate`` (thinning; exact)."""
    return thinned_arrivals(rate.rate_at, rate.envelope(), rng, duration_s=duration_s,
                            num_requests=num_requests)
