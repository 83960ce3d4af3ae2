"""Bin the step log and the occupancy trace into a regular time series.

Step-level signals are piecewise constant in time, so their integral over a bin is exact: a
cumulative integral evaluated at bin edges by linear interpolation (it is piecewise linear).

The cumulative integral has two samples per step, at its start and its end, but `np.interp`
reads only the two samples around each bin edge; only those are built (`_Integrals`), so a run
of millions of steps and a few thousand bins needs no array of samples. The numbers are those
of `np.interp` over every sample.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from sim.recorder import RunRecord

# Steps per chunk of a running sum: the arrays a chunk needs stay a few MB.
_CHUNK = 1 << 18

Values = np.ndarray | float  # one value per step, or the same for all


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
    counts = np.zeros(edges.size + 1, dtype=np.int64)
    for first in range(0, values.size, _CHUNK):
        # a value is ≤ every edge from the first one not below it
        first_edge = np.searchsorted(edges, values[first:first + _CHUNK], side="left")
        counts += np.bincount(first_edge, minlength=edges.size + 1)
    return np.cumsum(counts)[:edges.size]


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
    step_bin = np.floor_divide(ends, bin_s, out=ends).astype(np.int64)
    return np.minimum(step_bin, num_bins - 1, out=step_bin)


def _summed(step_bin: np.ndarray, values: np.ndarray, num_bins: int) -> np.ndarray:
    """Integer `values` summed per bin, a chunk of steps at a time (bincount weighs in floats,
    which add integers exactly)."""
    total = np.zeros(num_bins)
    for first in range(0, step_bin.size, _CHUNK):
        chunk = slice(first, first + _CHUNK)
        total += np.bincount(step_bin[chunk], weights=values[chunk], minlength=num_bins)
    return total.astype(np.int64)


def bin_timeseries(record: RunRecord, bin_s: float, end_s: float) -> pd.DataFrame:
    """One row per `bin_s` interval from 0 to `end_s` (the last event of the run)."""
    steps = record.steps
    replicas = record.num_replicas
    num_bins = max(1, int(np.ceil(end_s / bin_s)))
    edges = np.arange(num_bins + 1, dtype=np.float64) * bin_s
    step_bin = _step_bins(record, bin_s, num_bins)
    tokens = {name: _summed(step_bin, steps.column(name), num_bins)
              for name in ("new_tokens", "emitted_tokens", "preempted")}
    kv_fraction = record.kv_fraction()
    kv_max = np.zeros(num_bins)  # 0 where no step ends; a fraction is never below it
    np.maximum.at(kv_max, step_bin, kv_fraction)
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
