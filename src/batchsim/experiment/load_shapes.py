"""Arrival times for the shaped open-loop kinds: `weibull`, `rate_curve` and `diurnal`.

Kept out of ``traffic.py`` so that file only dispatches; each kind here maps its section onto
a ``workloads`` sampler, drawing from the run's arrivals generator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import batchsim.workloads as wl
from batchsim.experiment.schema import DiurnalArrivals, RateCurveArrivals, WeibullArrivals
from batchsim.workloads.diurnal import Burst, DiurnalRate, diurnal_arrivals
from batchsim.workloads.rate_curves import (
    PiecewiseRate,
    load_rate_curve,
    mean_rate_over,
    piecewise_arrivals,
)
from batchsim.workloads.weibull import weibull_arrivals

ShapedArrivals = WeibullArrivals | RateCurveArrivals | DiurnalArrivals
SHAPED_KINDS = (WeibullArrivals, RateCurveArrivals, DiurnalArrivals)


def shaped_arrival_times(arrivals: ShapedArrivals, *, duration_s: float | None,
                         num_requests: int | None, rng: np.random.Generator,
                         base_dir: Path) -> np.ndarray:
    """Sorted arrival times in seconds under exactly one of the two stopping rules."""
    if isinstance(arrivals, WeibullArrivals):
        return weibull_arrivals(rng, arrivals.rate, arrivals.cv, duration_s=duration_s,
                                num_requests=num_requests)
    if isinstance(arrivals, RateCurveArrivals):
        curve = rate_curve(arrivals, base_dir, duration_s)
        return piecewise_arrivals(curve, rng, duration_s=duration_s, num_requests=num_requests)
    return diurnal_arrivals(diurnal_rate(arrivals), rng, duration_s=duration_s,
                            num_requests=num_requests)


def rate_curve(config: RateCurveArrivals, base_dir: Path,
               duration_s: float | None) -> PiecewiseRate:
    """The section's curve, time-scaled, then rate-scaled (by `rate_scale` or to
    `mean_rate`)."""
    curve = _raw_curve(config, base_dir).scaled(time_factor=config.time_scale)
    if config.mean_rate is None:
        return curve.scaled(rate_factor=config.rate_scale)
    return curve.scaled(rate_factor=config.mean_rate / _mean(curve, duration_s))


def _raw_curve(config: RateCurveArrivals, base_dir: Path) -> PiecewiseRate:
    if config.points is not None:
        times = np.array([t for t, _ in config.points], dtype=np.float64)
        rates = np.array([rate for _, rate in config.points], dtype=np.float64)
        return PiecewiseRate(times - times[0], rates)
    assert config.path is not None and config.rate_column is not None  # schema rules
    path = wl.resolve_trace_path(config.path, base_dir)
    return load_rate_curve(path, config.time_column, config.rate_column)


def _mean(curve: PiecewiseRate, duration_s: float | None) -> float:
    """Mean over [0, duration_s), else from the first point to the last (the last rate, which
    holds forever, counts only when it is the only one)."""
    if duration_s is not None:
        mean = mean_rate_over(curve, duration_s)
    elif curve.starts_s.size == 1:
        mean = float(curve.rates[0])
    else:
        mean = mean_rate_over(curve, float(curve.starts_s[-1]))
    if mean <= 0:
        raise wl.WorkloadError("rate_curve: the curve's rate is 0 over the horizon, so it "
                               "cannot be rescaled to mean_rate")
    return mean


def diurnal_rate(config: DiurnalArrivals) -> DiurnalRate:
    bursts = tuple(Burst(b.start_s, b.duration_s, b.factor) for b in config.bursts)
    return DiurnalRate(config.mean_rate, config.amplitude, config.period_s, config.phase_s,
                       bursts)
