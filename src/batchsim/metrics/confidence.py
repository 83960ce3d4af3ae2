"""Means and 95% confidence intervals over independent replications (docs/design.md §6).

Each replication runs the same experiment with an independent seed, so every summary number
is one sample per replication; its interval is Student's t over those samples:
mean ± t(0.975, R−1) · s / √R.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

# Two-sided 95% critical values of Student's t by degrees of freedom (any statistics table,
# e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
    17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
    25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
    120: 1.980,
}
_NORMAL975 = 1.960
_DFS = sorted(_T975)


def t_critical(df: int) -> float:
    """t(0.975, df); between tabulated df, linear in 1/df (the standard interpolation)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two replications")
    if df in _T975:
        return _T975[df]
    if df > _DFS[-1]:
        low_df, low_t, high_inv, high_t = _DFS[-1], _T975[_DFS[-1]], 0.0, _NORMAL975
    else:
        above = bisect.bisect(_DFS, df)
        low_df, high_df = _DFS[above - 1], _DFS[above]
        low_t, high_t, high_inv = _T975[low_df], _T975[high_df], 1.0 / high_df
    share = (1.0 / low_df - 1.0 / df) / (1.0 / low_df - high_inv)
    return low_t + share * (high_t - low_t)


def t_interval(samples: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of a 95% t-interval; low == high == mean for one sample."""
    n = len(samples)
    mean = math.fsum(samples) / n
    if n == 1:
        return mean, mean, mean
    variance = math.fsum((x - mean) ** 2 for x in samples) / (n - 1)
    half = t_critical(n - 1) * math.sqrt(variance / n)
    return mean, mean - half, mean + half


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def aggregate(replications: list[Any]) -> tuple[Any, Any]:
    """(means, intervals) of summaries of the same shape, one per replication.

    Numbers become their mean and a `[low, high]` interval; a number missing (None or NaN)
    in any replication stays None; anything else (labels, lists) is taken from the first.
    """
    first = replications[0]
    mappings = [r for r in replications if isinstance(r, dict)]
    if mappings:
        # A mapping can be absent from some replications (e.g. a prompt-length bucket that no
        # request of that seed fell into): its numbers are then missing there. Keys are the
        # union over replications, in order of first appearance.
        keys = dict.fromkeys(key for mapping in mappings for key in mapping)
        means, intervals = {}, {}
        for key in keys:
            means[key], intervals[key] = aggregate(
                [r.get(key) if isinstance(r, dict) else None for r in replications])
        return means, intervals
    if _is_number(first):
        if any(not _is_number(r) or math.isnan(r) for r in replications):
            return None, None
        mean, low, high = t_interval([float(r) for r in replications])
        return mean, [low, high]
    return first, None
