"""Robust least squares on log-ratio residuals: scipy's trust-region fit with a soft-L1 loss.

Residuals are log(predicted / measured): a relative error, so a 3 µs kernel and a 30 ms one
weigh the same. The soft-L1 loss keeps a few odd kernels — a library switching algorithms at
one shape — from dragging the fit. Coordinates are unbounded (calibration/parameters.py maps
them to each parameter's range), so the solver needs no bounds; columns are scaled by the
Jacobian because the parameters span many orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

Residuals = Callable[[np.ndarray], np.ndarray]

_LOSS_SCALE = 0.1  # residuals beyond ~10% count linearly, not quadratically


@dataclass(frozen=True, slots=True)
class Solution:
    """The best coordinates found, their robust cost and the residual evaluations spent."""

    x: np.ndarray
    cost: float
    evaluations: int


def robust_cost(residuals: np.ndarray) -> float:
    """Σ soft-L1: 2f²(√(1 + (r/f)²) − 1); ≈ r² for small r, ≈ 2f|r| for large."""
    scaled = residuals / _LOSS_SCALE
    return float(np.sum(2.0 * _LOSS_SCALE**2 * (np.sqrt(1.0 + scaled**2) - 1.0)))


def minimise(residuals: Residuals, x0: np.ndarray) -> Solution:
    """The soft-L1 least-squares minimum reached from `x0`."""

    def finite_residuals(x: np.ndarray) -> np.ndarray:
        return _finite(residuals(x))

    result = least_squares(
        finite_residuals, np.asarray(x0, dtype=np.float64), method="trf",
        loss="soft_l1", f_scale=_LOSS_SCALE, x_scale="jac",
    )
    x = np.asarray(result.x, dtype=np.float64)
    return Solution(x=x, cost=robust_cost(finite_residuals(x)), evaluations=int(result.nfev))


def _finite(r: np.ndarray) -> np.ndarray:
    """Overflowing predictions count as a large residual, not a NaN that stops the fit."""
    return np.nan_to_num(r, nan=50.0, posinf=50.0, neginf=-50.0)
