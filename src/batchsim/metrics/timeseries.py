"""Bin the step log and the occupancy trace into a regular time series.

Step-level signals are piecewise constant in time, so their integral over a bin is exact: a
cumulative integral evaluated at bin edges by linear interpolation (it is piecewise linear).

The cumulative integral has two samples per step, at its start and its end, but `np.interp`
reads only the two samples around each bin edge; only those are built (`_Integrals`), so a run
of millions of steps and a few thousand bins needs no array of samples. The numbers are those
of `np.interp` over every sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from batchsim.sim.recorder import RunRecord

# Steps per chunk of a running sum: a chunk's arrays (512 kB each) stay in the core's cache
# between passes, and the temporaries stay small (docs/performance.md, item 38).
_CHUNK = 1 << 16

Values = np.ndarray | float  # one value per step, or the same for all
_TOKEN_COLUMNS = ("new_tokens", "emitted_tokens", "preempted")  # summed per bin


class _Integrals:
    """∫ at each edge of signals equal to values[k] on [starts[k], ends[k]) and 0 elsewhere.

    Intervals must not overlap (true for the steps of one replica). The cumulative integral's
    samples are x = (start₀, end₀, start₁, end₁, …) with f = (0, area₀, area₀, area₁, …), where
    area_k is the running sum of values·(ends − starts). For an edge v, np.interp uses the
    samples j, j+1 with x[j] ≤ v < x[j+1] (or the first or last one): those are the samples
    kept, with their running sums taken a chunk of steps at a time.
    """

    def __init__(self, edges: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.edges, self.starts, self.ends = edges, starts, ends
        self.samples = _samples_around(edges, starts, ends) if starts.size else None

    def __call__(self, values: Values) -> np.ndarray:
        edges, starts, ends = self.edges, self.starts, self.ends
        if starts.size == 0:
            return np.zeros_like(edges)
        if self.samples is None:
            return _integral_at_every_sample(edges, starts, ends, values)
        step, is_end = np.divmod(self.samples, 2)
        x = np.where(is_end == 1, ends[step], starts[step])
        area_step = step - 1 + is_end  # the step whose running sum the sample holds (−1: none)
        f = np.zeros(x.size)
        summed = area_step >= 0
        f[summed], total = _running_area(starts, ends, values, area_step[summed])
        return np.interp(edges, x, f, left=0.0, right=total)


def _samples_around(edges: np.ndarray, starts: np.ndarray,
                    ends: np.ndarray) -> np.ndarray | None:
    """Indices in x (see `_Integrals`) of the samples np.interp reads for the edges; None when x
    falls back across an edge, where its choice among several j depends on its search."""
    if _falls_across(edges, starts, ends):
        return None
    # x rises through every edge, so the samples ≤ an edge are the first j + 1 of them.
    at_or_below = _count_at_or_below(edges, starts) + _count_at_or_below(edges, ends)
    last = 2 * starts.size - 1
    return np.unique(np.clip(np.concatenate((at_or_below - 1, at_or_below)), 0, last))


def _falls_across(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether x falls from above an edge to at or below it: within a step (end < start) or
    from a step's end to the next start (steps a rounding error apart can do that)."""
    falls = ((ends, starts, ends < starts),
             (starts[1:], ends[:-1], starts[1:] < ends[:-1]))
    for low, high, where in falls:
        # x drops from `high` to `low`: is any edge in [low, high)?
        first_edge = np.searchsorted(edges, low[where], side="left")
        if (first_edge < np.searchsorted(edges, high[where], side="left")).any():
            return True
    return False


def _count_at_or_below(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """How many of `values` (in any order) are ≤ each edge."""
    if _ascending(values):  # one replica's steps: a search per edge, not one per value
        return np.searchsorted(values, edges, side="right")
    counts = np.zeros(edges.size + 1, dtype=np.int64)
    for first in range(0, values.size, _CHUNK):
        # a value is ≤ every edge from the first one not below it
        first_edge = np.searchsorted(edges, values[first:first + _CHUNK], side="left")
        counts += np.bincount(first_edge, minlength=edges.size + 1)
    return np.cumsum(counts)[:edges.size]


def _ascending(values: np.ndarray) -> bool:
    """Whether `values` never fall (False where a NaN is, which compares false)."""
    return bool(np.greater_equal(values[1:], values[:-1]).all())


def _running_area(starts: np.ndarray, ends: np.ndarray, values: Values,
                  steps: np.ndarray) -> tuple[np.ndarray, float]:
    """The running sum of values·(ends − starts) through each of `steps` (ascending), and
    over all steps.

    Taken a chunk at a time, each chunk starting from the sum so far: the same additions in
    the same order as one np.cumsum over every step, so the same numbers.
    """
    out = np.empty(steps.size)
    total = 0.0
    for first in range(0, starts.size, _CHUNK):
        chunk = slice(first, first + _CHUNK)
        mine = values[chunk] if isinstance(values, np.ndarray) else values
        part = mine * (ends[chunk] - starts[chunk])
        if first:
            part[0] += total
        np.cumsum(part, out=part)
        lo, hi = np.searchsorted(steps, (first, first + part.size))
        out[lo:hi] = part[steps[lo:hi] - first]
        total = float(part[-1])
    return out, total


def _integral_at_every_sample(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                              values: Values) -> np.ndarray:
    """`_Integrals` by np.interp over every sample (where x falls across an edge)."""
    x = np.empty(2 * starts.size)
    x[0::2], x[1::2] = starts, ends
    area = np.cumsum(values * (ends - starts))
    f = np.empty_like(x)
    f[1::2] = area
    f[0::2] = np.concatenate(([0.0], area[:-1]))
    return np.interp(edges, x, f, left=0.0, right=float(area[-1]))


def _bin_averages(edges: np.ndarray, record: RunRecord,
                  signals: list[Callable[[], Values]]) -> list[np.ndarray]:
    """Time average per bin of each signal (a column of the step log), summed over replicas."""
    steps = record.steps
    all_starts, all_durations = steps.column("start_s"), steps.column("duration_s")
    replica = steps.segment_column("replica")
    totals = [np.zeros(edges.size - 1) for _ in signals]
    for r in range(record.num_replicas):
        mine = replica == r
        rows = slice(None) if mine.all() else steps.per_row(mine)  # all rows: no copies
        starts = all_starts[rows]
        integrals = _Integrals(edges, starts, starts + all_durations[rows])
        for total, signal in zip(totals, signals, strict=True):
            values = signal()
            total += np.diff(integrals(values[rows] if isinstance(values, np.ndarray)
                                       else values))
    return [total / np.diff(edges) for total in totals]


def _occupancy_average(edges: np.ndarray, record: RunRecord, end: float) -> np.ndarray:
    t = np.frombuffer(record.occupancy_t, dtype=np.float64)
    n = np.frombuffer(record.occupancy_n, dtype=np.int64).astype(np.float64)
    if t.size == 0:
        return np.zeros(edges.size - 1)
    ends = np.append(t[1:], max(end, t[-1]))
    return np.diff(_Integrals(edges, t, ends)(n)) / np.diff(edges)


def _step_bins(record: RunRecord, bin_s: float, num_bins: int) -> np.ndarray:
    """The bin of each step: the one its end falls in (the last bin for any later)."""
    steps = record.steps
    ends = steps.column("start_s") + steps.column("duration_s")
    step_bin = np.empty(ends.size, dtype=np.int64)
    for first in range(0, ends.size, _CHUNK):  # a chunk at a time: the temporaries stay small
        chunk = slice(first, first + _CHUNK)
        step_bin[chunk] = _floor_divide(ends[chunk], bin_s)  # cast as astype(int64) does
    return np.minimum(step_bin, num_bins - 1, out=step_bin)


def _floor_divide(values: np.ndarray, divisor: float) -> np.ndarray:
    """The numbers of `np.floor_divide(values, divisor)` (which may be written into
    `values`), at about a third of its cost.

    floor_divide takes the floor of the exact quotient (through fmod, the slow part). For
    values ≥ 0 and a divisor > 0, the rounded quotient `values / divisor` has the same floor
    except where it was rounded up onto a whole number: only those are divided again.
    """
    if not (divisor > 0 and math.isfinite(divisor) and (values >= 0).all()):
        return np.floor_divide(values, divisor, out=values)
    quotient = values / divisor
    floored = np.floor(quotient)
    whole = np.flatnonzero(floored == quotient)
    floored[whole] = np.floor_divide(values[whole], divisor)
    return floored


def _summed_by_segment(record: RunRecord, step_bin: np.ndarray, names: tuple[str, ...],
                       num_bins: int) -> list[np.ndarray]:
    """Per-segment integer columns of the step log summed per bin.

    The rows of a segment that fall in one bin add up to the segment's value times their
    number, so the sums are taken over those runs of rows (about a segment or a bin each),
    not over every row. The products and sums are whole numbers (below 2⁵³, exact in
    floats), so they are the integers of summing row by row.
    """
    steps = record.steps
    rows = np.frombuffer(steps.segment_rows, dtype=np.int32)
    segment_first = np.cumsum(rows, dtype=np.int64) - rows
    starts_run = np.zeros(step_bin.size, dtype=bool)  # a new segment or a new bin
    starts_run[segment_first[rows > 0]] = True  # (a segment of no rows starts no run)
    np.logical_or(starts_run[1:], step_bin[1:] != step_bin[:-1], out=starts_run[1:])
    run_first = np.flatnonzero(starts_run)
    del starts_run
    run_rows = np.diff(run_first, append=step_bin.size)
    run_segment = np.searchsorted(segment_first, run_first, side="right") - 1
    run_bin = step_bin[run_first]
    return [np.bincount(run_bin, weights=steps.segment_column(name)[run_segment] * run_rows,
                        minlength=num_bins).astype(np.int64)
            for name in names]


def _max_per_bin(step_bin: np.ndarray, values: np.ndarray, num_bins: int) -> np.ndarray:
    """`np.maximum.at` of `values` by bin into zeros (0 where no step ends; a KV fraction is
    never below it).

    Where the bins never fall (one replica), each bin's rows are consecutive and found by a
    search per bin: one `maximum.reduceat` over them, then the maximum with 0, gives the same
    numbers (NaN and signed zeros included) in a fifth of the time.
    """
    largest = np.zeros(num_bins)
    if not (step_bin.size and step_bin[0] >= 0 and _ascending(step_bin)):
        np.maximum.at(largest, step_bin, values)
        return largest
    firsts = np.searchsorted(step_bin, np.arange(num_bins), side="left")  # each bin's first row
    has_rows = firsts < np.append(firsts[1:], step_bin.size)
    largest[has_rows] = np.maximum(0.0, np.maximum.reduceat(values, firsts[has_rows]))
    return largest


MAX_BINS = 1_000_000
"""At most this many time-series rows: a longer run's bins are widened to end / MAX_BINS."""


def bin_timeseries(record: RunRecord, bin_s: float, end_s: float) -> pd.DataFrame:
    """One row per `bin_s` interval from 0 to `end_s` (the last event of the run); a run so
    long that it would need more than MAX_BINS rows gets MAX_BINS wider ones instead (each
    row's `t_start_s` / `t_end_s` say how wide), so the table's memory stays bounded."""
    steps = record.steps
    replicas = record.num_replicas
    if end_s / bin_s > MAX_BINS:
        bin_s = end_s / MAX_BINS
    num_bins = max(1, int(np.ceil(end_s / bin_s)))
    edges = np.arange(num_bins + 1, dtype=np.float64) * bin_s
    step_bin = _step_bins(record, bin_s, num_bins)
    tokens = dict(zip(_TOKEN_COLUMNS, _summed_by_segment(record, step_bin, _TOKEN_COLUMNS,
                                                         num_bins), strict=True))
    kv_fraction = record.kv_fraction()
    kv_max = _max_per_bin(step_bin, kv_fraction, num_bins)
    del step_bin
    busy, batch, waiting, kv_mean = _bin_averages(edges, record, [
        lambda: 1.0, lambda: steps.column("num_seqs"), lambda: steps.column("num_waiting"),
        lambda: kv_fraction,
    ])
    return pd.DataFrame({
        "t_start_s": edges[:-1],
        "busy_fraction": busy / replicas,
        "batch_size": batch / replicas,
        "num_waiting": waiting,
        "in_system": _occupancy_average(edges, record, end_s),
        "kv_utilization_mean": kv_mean / replicas,
        "kv_utilization_max": kv_max,
        "new_tokens": tokens["new_tokens"],
        "output_tokens": tokens["emitted_tokens"],
        "preemptions": tokens["preempted"],
    })
