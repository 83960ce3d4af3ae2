"""Bin the step log and the occupancy trace into a regular time series.

Step-level signals are piecewise constant in time, so their integral over a bin is exact: a
cumulative integral evaluated at bin edges by linear interpolation (it is piecewise linear).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.recorder import RunRecord


def _integral_at(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 values: np.ndarray) -> np.ndarray:
    """∫ of a signal equal to values[k] on [starts[k], ends[k]) and 0 elsewhere, at each edge.

    Intervals must not overlap (true for the steps of one replica).
    """
    if starts.size == 0:
        return np.zeros_like(edges)
    x = np.empty(2 * starts.size)
    x[0::2], x[1::2] = starts, ends
    area = np.cumsum(values * (ends - starts))
    f = np.empty_like(x)
    f[1::2] = area
    f[0::2] = np.concatenate(([0.0], area[:-1]))
    return np.interp(edges, x, f, left=0.0, right=float(area[-1]))


def _bin_average(edges: np.ndarray, starts: np.ndarray, ends: np.ndarray, values: np.ndarray,
                 replica: np.ndarray, num_replicas: int) -> np.ndarray:
    """Time average per bin, summed over replicas."""
    total = np.zeros(edges.size - 1)
    for r in range(num_replicas):
        mine = replica == r
        f = _integral_at(edges, starts[mine], ends[mine], values[mine])
        total += np.diff(f)
    return total / np.diff(edges)


def _occupancy_average(edges: np.ndarray, record: RunRecord, end: float) -> np.ndarray:
    t = np.frombuffer(record.occupancy_t, dtype=np.float64)
    n = np.frombuffer(record.occupancy_n, dtype=np.int64).astype(np.float64)
    if t.size == 0:
        return np.zeros(edges.size - 1)
    ends = np.append(t[1:], max(end, t[-1]))
    return np.diff(_integral_at(edges, t, ends, n)) / np.diff(edges)


def bin_timeseries(record: RunRecord, bin_s: float, end_s: float) -> pd.DataFrame:
    """One row per `bin_s` interval from 0 to `end_s` (the last event of the run)."""
    steps = record.steps.as_arrays()
    starts = steps["start_s"]
    ends = starts + steps["duration_s"]
    replica = steps["replica"]
    replicas = record.num_replicas
    num_bins = max(1, int(np.ceil(end_s / bin_s)))
    edges = np.arange(num_bins + 1, dtype=np.float64) * bin_s
    kv_fraction = steps["kv_used_blocks"] / record.kv_capacity(replica)
    step_bin = np.minimum((ends // bin_s).astype(np.int64), num_bins - 1)

    def summed(values: np.ndarray) -> np.ndarray:
        return np.bincount(step_bin, weights=values, minlength=num_bins)

    kv_max = (pd.Series(kv_fraction).groupby(step_bin).max()
              .reindex(range(num_bins), fill_value=0.0).to_numpy())
    ones = np.ones_like(starts)
    return pd.DataFrame({
        "t_start_s": edges[:-1],
        "busy_fraction": _bin_average(edges, starts, ends, ones, replica, replicas) / replicas,
        "batch_size": _bin_average(edges, starts, ends, steps["num_seqs"].astype(float),
                                   replica, replicas) / replicas,
        "num_waiting": _bin_average(edges, starts, ends, steps["num_waiting"].astype(float),
                                    replica, replicas),
        "in_system": _occupancy_average(edges, record, end_s),
        "kv_utilization_mean": _bin_average(edges, starts, ends, kv_fraction, replica,
                                            replicas) / replicas,
        "kv_utilization_max": kv_max,
        "new_tokens": summed(steps["new_tokens"].astype(float)).astype(np.int64),
        "output_tokens": summed(steps["emitted_tokens"].astype(float)).astype(np.int64),
        "preemptions": summed(steps["preempted"].astype(float)).astype(np.int64),
    })
