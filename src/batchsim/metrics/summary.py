"""Summary metrics of one arm (docs/design.md §6), computed from the request table and the run
record (its inter-token gaps and the window sums of its steps).

The measured requests are those arriving in [warmup_s, last arrival − cooldown_s]. Rates divide
by the measurement window: from warmup_s to the finish of the last measured request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from batchsim.metrics.bench_compat import bench_compat, weighted_std
from batchsim.metrics.kv_fragmentation import kv_fragmentation
from batchsim.sim.recorder import RunRecord

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
LATENCY_COLUMNS = ("ttft_s", "tpot_s", "e2e_s", "queue_delay_s")
_POSITIVE_INF_BITS = int(np.array(np.inf).view(np.uint64))


@dataclass(frozen=True, slots=True)
class SLOTargets:
    """Per-request thresholds; a request meets the SLO when it is under every one given."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def as_dict(self) -> dict[str, float]:
        targets = {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}
        return {k: v for k, v in targets.items() if v is not None}


def distribution(values: np.ndarray) -> dict[str, float | None]:
    """Mean and tail percentiles; None where there is no sample."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, **dict.fromkeys(PERCENTILES)}
    stats: dict[str, float | None] = {"mean": float(values.mean())}
    # All percentiles from one partition: numpy computes each exactly as it would alone
    # (the same order statistics and interpolation), at about a third of four calls' cost.
    tails = np.percentile(values, list(PERCENTILES.values())).tolist()
    stats.update(zip(PERCENTILES, tails, strict=True))
    return stats


def distribution_with_max(values: np.ndarray) -> dict[str, float | None]:
    """`distribution` and the largest value: for token gaps, where one rare stall is the
    story and even p99.9 can miss it."""
    stats = distribution(values)
    values = values[~np.isnan(values)]
    stats["max"] = float(values.max()) if values.size else None
    return stats


def weighted_distribution(values: np.ndarray, weights: np.ndarray) -> dict[str, float | None]:
    """`distribution` of a sample given as values with integer repeat counts.

    Percentiles interpolate linearly between order statistics, exactly as `np.percentile`
    does on the expanded sample (which would need memory per token, not per value).
    """
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if values.size == 0:
        return {"mean": None, **dict.fromkeys(PERCENTILES)}
    order = np.argsort(values, kind="stable")
    return _sorted_distribution(values[order], weights[order])


def _sorted_distribution(values: np.ndarray, weights: np.ndarray) -> dict[str, float | None]:
    """`weighted_distribution` of values in ascending order (a stable sort) with positive
    integer weights, not empty."""
    # numpy's own pairwise sum, not np.dot: a BLAS dot splits long vectors over its threads,
    # so its last bits depend on the machine's thread count (same seed, same bytes).
    weighted_sum = np.add.reduce(values * weights.astype(np.float64))
    last_index = np.cumsum(weights, dtype=np.int64)
    last_index -= 1  # position of each value's last copy, expanded
    total = int(last_index[-1]) + 1
    stats: dict[str, float | None] = {"mean": float(weighted_sum / total)}
    for key, q in PERCENTILES.items():
        position = q / 100.0 * (total - 1)
        low, high = math.floor(position), math.ceil(position)
        a = float(values[np.searchsorted(last_index, low)])
        b = float(values[np.searchsorted(last_index, high)])
        t = position - low
        # numpy's linear interpolation, term for term
        stats[key] = b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t
    return stats


def _itl_distribution(record: RunRecord,
                      measured: np.ndarray) -> tuple[dict[str, float | None], float | None]:
    """`weighted_distribution` of the inter-token gaps of the measured requests, and their
    standard deviation (for `bench_compat`, from the same arrays: they are not made twice).

    There is a gap per engine step, so these can be a run's largest arrays: each is replaced
    by its sorted copy as it is made, to the same order and numbers as `weighted_distribution`.
    """
    values, weights = record.itl.values_and_weights(measured)  # new arrays, weights > 0
    if values.size == 0:
        return {"mean": None, **dict.fromkeys(PERCENTILES), "max": None}, None
    # The weights' order among equal gaps matters to the mean: a stable order. Taking the
    # values by it is a gather, far cheaper than sorting them again (docs/performance.md,
    # item 26); the old arrays go as the new ones come, so the peak grows by the weights only.
    order = stable_order(values)
    weights = weights[order]
    values = values[order]
    del order
    stats: dict[str, float | None] = {**_sorted_distribution(values, weights),
                                      "max": float(values[-1])}
    mean = stats["mean"]
    assert mean is not None
    return stats, weighted_std(values, weights, mean)


def stable_order(values: np.ndarray) -> np.ndarray:
    """`np.argsort(values, kind="stable")` of float64 values: the same indices.

    Doubles from +0.0 to +inf order as their bit patterns do as integers, and numpy's stable
    sort compares int64 faster (docs/performance.md, item 37). Gaps are never
    negative; an array with a negative value, -0.0 or a NaN takes the float sort.
    """
    if values.dtype == np.float64 and values.size:
        bits = values.view(np.uint64)
        if int(bits.max()) <= _POSITIVE_INF_BITS:  # a negative value or a NaN lies above it
            return np.argsort(bits.view(np.int64), kind="stable")
    return np.argsort(values, kind="stable")


def measured_mask(requests: pd.DataFrame, warmup_s: float, cooldown_s: float) -> np.ndarray:
    arrival = requests["arrival_s"].to_numpy()
    if arrival.size == 0:
        return np.zeros(0, dtype=bool)
    return (arrival >= warmup_s) & (arrival <= arrival.max() - cooldown_s)


def meets_slo(requests: pd.DataFrame, slo: SLOTargets) -> np.ndarray:
    """Finished and under every target (a one-token request has no TPOT to miss)."""
    ok = requests["finished"].to_numpy().copy()
    for column, target in slo.as_dict().items():
        values = requests[column].to_numpy()
        undefined_tpot = np.isnan(values) if column == "tpot_s" else False
        ok &= undefined_tpot | (values <= target)
    return ok


def rejected_by_reason(requests: pd.DataFrame, measured: np.ndarray) -> dict[str, int]:
    """Measured rejections counted by `reject_kind` (the stable label of the rule that rejected
    them; the full reason is in requests.parquet), in name order."""
    rejected = requests["rejected"].to_numpy() & measured
    counts = requests["reject_kind"][rejected].value_counts()
    return {str(kind): int(counts[kind]) for kind in sorted(counts.index)}


def _step_window_stats(record: RunRecord, start: float, end: float) -> dict[str, float]:
    """GPU busy fraction, KV utilisation and mean batch size over [start, end], from the
    window sums the run kept (sim/step_window.py: every step's seconds in the window)."""
    sums = record.steps.window_sums(start, end, range(record.num_replicas))
    span = max(end - start, 1e-12) * record.num_replicas
    return {
        "gpu_busy_fraction": sums.busy_s / span,
        "kv_mean": sums.kv_s / span,
        "kv_max": sums.kv_max,
        "mean_batch_size": sums.batch_s / sums.busy_s if sums.busy_s else 0.0,
    }


def summarize(
    requests: pd.DataFrame, record: RunRecord, *, warmup_s: float, cooldown_s: float,
    slo: SLOTargets,
) -> dict[str, object]:
    """Every summary metric of one arm, with snake_case names that carry their unit."""
    record.steps.check_window(warmup_s, cooldown_s)
    measured = measured_mask(requests, warmup_s, cooldown_s)
    done = requests[measured & requests["finished"].to_numpy()]
    num_measured = int(measured.sum())
    end = float(done["finish_s"].max()) if len(done) else warmup_s
    window = max(end - warmup_s, 1e-12)
    good = int((meets_slo(requests, slo) & measured).sum())
    steps = _step_window_stats(record, warmup_s, end)
    prompt_done = int(done["prompt_tokens"].sum())
    output_done = int(done["output_tokens"].sum())
    recomputed = int(requests["recomputed_tokens"][measured].sum())
    preemptions = int(requests["preemptions"][measured].sum())
    metrics: dict[str, object] = {name: distribution(done[name].to_numpy())
                                  for name in LATENCY_COLUMNS}
    itl, itl_std = _itl_distribution(record, measured)
    metrics["itl_s"] = itl
    # Over the same requests as `itl_s` (measured, finished or not), so its max is itl's.
    metrics["max_gap_s"] = distribution_with_max(requests["max_gap_s"].to_numpy()[measured])
    metrics.update({
        "measured_requests": num_measured,
        "completed": len(done),
        "rejected": num_measured - len(done),
        "rejected_by_reason": rejected_by_reason(requests, measured),
        "window_s": window,
        "request_throughput_rps": len(done) / window,
        "input_throughput_tps": prompt_done / window,
        "output_throughput_tps": output_done / window,
        "total_throughput_tps": (prompt_done + output_done) / window,
        "goodput_rps": good / window,
        "slo_attainment": good / num_measured if num_measured else None,
        "preemptions": preemptions,
        "preemptions_per_1000_requests": 1000.0 * preemptions / max(1, num_measured),
        "recomputed_tokens": recomputed,
        "recomputed_token_fraction": recomputed / max(1, prompt_done + output_done + recomputed),
        "kv_utilization": {"mean": steps["kv_mean"], "max": steps["kv_max"]},
        "mean_batch_size": steps["mean_batch_size"],
        "gpu_busy_fraction": steps["gpu_busy_fraction"],
    })
    metrics["kv_fragmentation"] = kv_fragmentation(record)
    metrics["slo_met"] = _slo_verdicts(metrics, slo)
    metrics["bench_compat"] = bench_compat(
        done, measured=num_measured, window_s=window, good=good if slo.as_dict() else None,
        itl=itl, itl_std_s=itl_std)
    return metrics


def _slo_verdicts(metrics: dict[str, object], slo: SLOTargets) -> dict[str, bool | None]:
    """Whether each SLO's p99 target holds over the measured requests."""
    verdicts: dict[str, bool | None] = {}
    for column, target in slo.as_dict().items():
        dist = metrics[column]
        assert isinstance(dist, dict)
        p99 = dist["p99"]
        verdicts[f"{column.removesuffix('_s')}_p99_s"] = None if p99 is None else p99 <= target
    return verdicts
