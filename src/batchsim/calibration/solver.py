"""Robust Levenberg–Marquardt on log-ratio residuals, in numpy (no scipy dependency).

Residuals are log(predicted / measured): a relative error, so a 3 µs kernel and a 30 ms one
weigh the same. The soft-L1 loss (iteratively reweighted) keeps a few odd kernels — a library
switching algorithms at one shape — from dragging the fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Residuals = Callable[[np.ndarray], np.ndarray]

_LOSS_SCALE = 0.1  # residuals beyond ~10% count linearly, not quadratically
_STEP = 1e-5  # forward-difference step in the unbounded coordinates


@dataclass(frozen=True, slots=True)
class Solution:
    """The best coordinates found and their robust cost."""

    x: np.ndarray
    cost: float
    iterations: int


def robust_cost(residuals: np.ndarray) -> float:
    """Σ soft-L1: 2f²(√(1 + (r/f)²) − 1); ≈ r² for small r, ≈ 2f|r| for large."""
    scaled = residuals / _LOSS_SCALE
    return float(np.sum(2.0 * _LOSS_SCALE**2 * (np.sqrt(1.0 + scaled**2) - 1.0)))


def minimise(residuals: Residuals, x0: np.ndarray, max_iterations: int = 200) -> Solution:
    """Levenberg–Marquardt with soft-L1 weights, from `x0`."""
    x = np.asarray(x0, dtype=np.float64).copy()
    r = _finite(residuals(x))
    cost = robust_cost(r)
    damping = 1e-3
    iterations = 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007  (reported below)
        weights = 1.0 / np.sqrt(1.0 + (r / _LOSS_SCALE) ** 2)
        jacobian = _jacobian(residuals, x, r)
        weighted = jacobian * weights[:, None]
        normal = weighted.T @ jacobian
        gradient = weighted.T @ r
        improved = False
        while damping < 1e10:
            lhs = normal + damping * np.diag(np.diag(normal) + 1e-12)
            try:
                delta = np.linalg.solve(lhs, -gradient)
            except np.linalg.LinAlgError:
                damping *= 10.0
                continue
            candidate = x + delta
            r_new = _finite(residuals(candidate))
            cost_new = robust_cost(r_new)
            if cost_new < cost:
                improved = abs(cost - cost_new) > 1e-12 * max(cost, 1e-300)
                x, r, cost = candidate, r_new, cost_new
                damping = max(damping / 3.0, 1e-9)
                break
            damping *= 10.0
        if not improved:
            break
    return Solution(x=x, cost=cost, iterations=iterations)


def _jacobian(residuals: Residuals, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    columns = []
    for index in range(x.size):
        shifted = x.copy()
        shifted[index] += _STEP
        columns.append((_finite(residuals(shifted)) - r) / _STEP)
    return np.stack(columns, axis=1)


def _finite(r: np.ndarray) -> np.ndarray:
    """Overflowing predictions count as a large residual, not a NaN that stops the fit."""
    return np.nan_to_num(r, nan=50.0, posinf=50.0, neginf=-50.0)
