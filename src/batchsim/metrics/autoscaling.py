"""An autoscaled arm's replicas over time: their integral (GPU-hours), per-bin means (the time
series' `replicas_*` columns) and the summary's `autoscaler` block (docs/how-to/autoscaling.md).

The pool's timeline (sim/replica_pool.py `ScaleTimeline`) holds the counts from each change
on, the last until the run's end: piecewise constant, so every integral here is exact.
"""

from __future__ import annotations

import numpy as np

from batchsim.sim.replica_pool import ScaleTimeline

STATES = ("serving", "starting", "draining")


def _counts(timeline: ScaleTimeline, state: str) -> np.ndarray:
    return np.frombuffer(getattr(timeline, state), dtype=np.int64).astype(np.float64)


def active(timeline: ScaleTimeline) -> np.ndarray:
    """Replicas paid for from each change on: serving, starting or draining."""
    return sum((_counts(timeline, s) for s in STATES), np.zeros(len(timeline.t)))


def cumulative(timeline: ScaleTimeline, counts: np.ndarray, at: np.ndarray) -> np.ndarray:
    """∫₀ˣ counts dt at each x of `at` (x ≥ 0)."""
    t = np.frombuffer(timeline.t, dtype=np.float64)
    before = np.concatenate(([0.0], np.cumsum(counts[:-1] * np.diff(t))))
    k = np.searchsorted(t, at, side="right") - 1
    return before[k] + counts[k] * (at - t[k])


def integral(timeline: ScaleTimeline, counts: np.ndarray, start: float, end: float) -> float:
    """∫ counts dt over [start, end]: replica-seconds."""
    if end <= start:
        return 0.0
    low, high = cumulative(timeline, counts, np.array([start, end]))
    return float(high - low)


def bin_means(timeline: ScaleTimeline, edges: np.ndarray) -> dict[str, np.ndarray]:
    """`replicas_<state>`: each state's time average over each bin between `edges`."""
    widths = np.diff(edges)
    return {f"replicas_{state}": np.diff(cumulative(timeline, _counts(timeline, state), edges))
            / widths for state in STATES}


def autoscaler_metrics(timeline: ScaleTimeline, *, start: float, end: float, run_end: float,
                       busy_s: float, gpus_per_replica: int) -> dict[str, object]:
    """The summary's `autoscaler` block over the measured window [start, end] (`run_end`: the
    last finish, for the whole run's GPU-hours; `busy_s`: the window's busy replica-seconds)."""
    t = np.frombuffer(timeline.t, dtype=np.float64)
    serving = _counts(timeline, "serving")
    # The segments that overlap the window (each holds from its change to the next).
    upto = np.append(t[1:], np.inf)
    overlap = (upto > start) & (t < end) if end > start else (t <= start) & (upto > start)
    replica_s = integral(timeline, active(timeline), start, end)
    span = max(end - start, 1e-12)
    return {
        "scale_ups": timeline.scale_ups,
        "scale_downs": timeline.scale_downs,
        "serving_min": int(serving[overlap].min()),
        "serving_max": int(serving[overlap].max()),
        "serving_mean": integral(timeline, serving, start, end) / span,
        "active_mean": replica_s / span,
        "starting_replica_s": integral(timeline, _counts(timeline, "starting"), start, end),
        "replica_s": replica_s,
        "gpu_hours_whole_run": integral(timeline, active(timeline), 0.0, run_end)
        * gpus_per_replica / 3600.0,
        "gpu_busy_fraction_of_active": busy_s / replica_s if replica_s > 0 else 0.0,
        # Every change of the counts, the whole run: the scale events themselves.
        "timeline": {"t_s": t.tolist(), **{s: getattr(timeline, s).tolist() for s in STATES}},
    }
