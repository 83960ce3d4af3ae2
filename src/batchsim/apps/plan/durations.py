"""Latencies as a reader says them: 73 ms, 1.05 s, 36 s, 25 min, with three figures at most.

A plan's p99s range from milliseconds (TPOT at a light load) to tens of minutes (TTFT far
above capacity, where the queue never drains); one unit for the whole column would print the
long ones as seven-digit milliseconds or the short ones as 0.0 s.
"""

from __future__ import annotations

import math

_UNITS = ((3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"))


def latency_text(seconds: float | None) -> str:
    """`seconds` in the largest unit it is at least one of, to three significant figures
    (no fewer than the integer part needs); '-' for no value, 'rejected' for an infinite
    one (a p99 where rejections count as misses)."""
    if seconds is None:
        return "-"
    if math.isinf(seconds):
        return "rejected"
    # Rounded before choosing, so that 59.999 s reads 1 min rather than 60 s.
    scale, unit = next(((s, u) for s, u in _UNITS if round(seconds / s, 2) >= 1), _UNITS[-1])
    value = seconds / scale
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    text = f"{value:,.{digits}f}"
    if "." in text:  # 1.50 s reads as 1.5 s, 2.00 s as 2 s
        text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}"
