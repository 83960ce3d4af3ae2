"""Means and 95% confidence intervals over independent replications (docs/design.md §6).

Each replication runs the same experiment with an independent seed, so every summary number
is one sample per replication; its interval is Student's t over those samples:
mean ± t(0.975, R−1) · s / √R.
"""

from __future__ import annotations

import math
from typing import Any

from scipy.stats import t as student_t


def t_critical(df: int) -> float:
    """t(0.975, df), the two-sided 95% critical value of Student's t."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two replications")
    return float(student_t.ppf(0.975, df))


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
