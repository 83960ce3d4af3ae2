"""One run of a setup, measured for the plan: the run's summary metrics plus what the summary
does not hold — percentiles that count rejected requests as misses, and the TTFT trend that
shows a growing queue. Computed in the worker that ran it, so only small numbers travel."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batchsim.apps.sweep.runs import RunTask, run_task
from batchsim.experiment.loader import load_experiment
from batchsim.metrics.summary import measured_mask

SLO_COLUMNS = ("ttft_s", "tpot_s", "e2e_s")


@dataclass(frozen=True, slots=True)
class TtftTrend:
    """Mean arrival time and mean TTFT of the first and the last third of the measured
    requests (by arrival; TTFT over the finished ones): how fast the queue grew."""

    early_arrival_s: float
    early_ttft_s: float
    late_arrival_s: float
    late_ttft_s: float

    @property
    def growth_s(self) -> float:
        return self.late_ttft_s - self.early_ttft_s

    @property
    def growth_per_s(self) -> float:
        """Seconds of TTFT gained per second of arrivals (about load / capacity − 1 when
        overloaded)."""
        span = self.late_arrival_s - self.early_arrival_s
        return self.growth_s / span if span > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RunStats:
    """What the plan needs from one run of one arm."""

    metrics: dict[str, Any]  # the arm's summary.json metrics
    p99: dict[str, float | None]  # per SLO column; inf when rejections reach the p99
    measured: int
    rejected: int
    ttft_trend: TtftTrend | None  # None with too few finished requests to tell
    served_output_tps: float | None  # output tokens served per second of arrivals
    skipped: bool = False  # read back from disk, not run


def p99_counting_misses(values: np.ndarray) -> float | None:
    """p99 of a sample in which a rejected request is +inf (it never got its tokens).

    Without rejections this is `np.percentile(values, 99)`, as in summary.json; with them, the
    p99 is infinite as soon as its interpolation touches a rejected request — i.e. whenever
    more than about 1% of the requests were rejected.
    """
    if values.size == 0:
        return None
    if np.isfinite(values).all():
        return float(np.percentile(values, 99.0))
    ordered = np.sort(values)
    position = 0.99 * (ordered.size - 1)
    low, high = math.floor(position), math.ceil(position)
    if position == low:
        return float(ordered[low])
    if not np.isfinite(ordered[high]):
        return math.inf
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def _slo_sample(requests: pd.DataFrame, column: str) -> np.ndarray:
    """The column over the given requests, rejected ones as +inf. TPOT is undefined for a
    finished one-token request (no gap to time): it is left out, as in the summary."""
    values = requests[column].to_numpy(dtype=float).copy()
    rejected = ~requests["finished"].to_numpy()
    values[rejected] = math.inf
    return values[~np.isnan(values)]


def ttft_trend(requests: pd.DataFrame) -> TtftTrend | None:
    """The TTFT trend of the measured requests, from their first and last thirds."""
    ordered = requests.sort_values("arrival_s", kind="stable")
    third = len(ordered) // 3
    if third == 0:
        return None
    early, late = ordered.iloc[:third], ordered.iloc[-third:]
    early_done, late_done = early[early["finished"]], late[late["finished"]]
    if not len(early_done) or not len(late_done):
        return None
    return TtftTrend(float(early_done["arrival_s"].mean()), float(early_done["ttft_s"].mean()),
                     float(late_done["arrival_s"].mean()), float(late_done["ttft_s"].mean()))


def served_output_tps(requests: pd.DataFrame) -> float | None:
    """Output tokens of the finished measured requests per second of their arrival span.

    For a run that keeps up with its load this is the rate it produces tokens at in steady
    state (arrival rate × mean output). The summary's `output_throughput_tps` divides by a
    window that also holds the final drain (the last long answers finishing after arrivals
    stop), which on a short run understates it.
    """
    if len(requests) < 2:
        return None
    span = float(requests["arrival_s"].max() - requests["arrival_s"].min())
    served = requests["output_tokens"][requests["finished"]].sum()
    return float(served) / span if span > 0 else None


def stats_of_folder(out_dir: Path, metrics: dict[str, Any], warmup_s: float,
                    cooldown_s: float, skipped: bool = False, arm: str | None = None
                    ) -> RunStats:
    """RunStats of one arm of a run folder (`arm`, or the only one in requests.parquet)."""
    requests = pd.read_parquet(out_dir / "requests.parquet")
    if arm is not None:
        requests = requests[requests["arm"] == arm]
    requests = requests[measured_mask(requests, warmup_s, cooldown_s)]
    return RunStats(
        metrics=metrics,
        p99={column: p99_counting_misses(_slo_sample(requests, column))
             for column in SLO_COLUMNS},
        measured=len(requests), rejected=int((~requests["finished"]).sum()),
        ttft_trend=ttft_trend(requests), served_output_tps=served_output_tps(requests),
        skipped=skipped)


def measure_run(task: RunTask) -> RunStats:
    """Run one setup's replication (or read it back) and measure it: the executors' task."""
    outcome = run_task(task)
    exp, _ = load_experiment(Path(task.file), task.overrides)
    (row,) = outcome.rows  # a setup runs one arm
    return stats_of_folder(Path(task.out_dir), row["metrics"], exp.warmup_s, exp.cooldown_s,
                           skipped=outcome.skipped)
