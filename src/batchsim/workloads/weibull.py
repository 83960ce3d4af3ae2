"""Weibull renewal arrivals with a target mean rate and coefficient of variation.

A Weibull with shape k has cv² = Γ(1 + 2/k) / Γ(1 + 1/k)² − 1, which falls as k grows (k = 1
is exponential, cv = 1). There is no closed-form inverse, so the shape for a target cv is found
by bisection; the scale then sets the mean gap to 1 / rate. Next to ``gamma_arrivals`` (same
mean and cv), a Weibull with cv > 1 has a heavier tail of long lulls.
"""

from __future__ import annotations

import math

import numpy as np

from batchsim.workloads.arrivals import _check_rate, _renewal_arrivals

# Shapes spanning cv from ~4e5 (k = 0.05) down to ~6e-4 (k = 2000).
_SHAPE_RANGE = (0.05, 2000.0)


def _log_cv2_plus_one(shape: float) -> float:
    # lgamma keeps this finite where Γ itself would overflow (small shapes).
    return math.lgamma(1 + 2 / shape) - 2 * math.lgamma(1 + 1 / shape)


def weibull_shape_for_cv(cv: float) -> float:
    """The Weibull shape k whose coefficient of variation is ``cv``."""
    target = math.log1p(cv**2) if math.isfinite(cv) and cv > 0 else math.nan
    low, high = _SHAPE_RANGE
    if not (_log_cv2_plus_one(high) <= target <= _log_cv2_plus_one(low)):
        raise ValueError(f"weibull arrival cv must be between 0.001 and 1000, got {cv}")
    # Bisect on log k: the shapes span five orders of magnitude.
    log_low, log_high = math.log(low), math.log(high)
    for _ in range(100):
        middle = (log_low + log_high) / 2
        if _log_cv2_plus_one(math.exp(middle)) > target:
            log_low = middle  # cv still too large: a larger shape is needed
        else:
            log_high = middle
    return math.exp((log_low + log_high) / 2)


def weibull_arrivals(
    rng: np.random.Generator,
    rate: float,
    cv: float,
    *,
    duration_s: float | None = None,
    num_requests: int | None = None,
) -> np.ndarray:
    """Renewal process with Weibull gaps of mean 1/rate and coefficient of variation ``cv``."""
    _check_rate(rate)
    shape = weibull_shape_for_cv(cv)
    scale = 1.0 / (rate * math.gamma(1 + 1 / shape))
    return _renewal_arrivals(
        lambda n: scale * rng.weibull(shape, size=n), rate, duration_s, num_requests
    )
