"""An autoscaled arm (an arm's `autoscaler`, docs/how-to/autoscaling.md): its settings for the
kernel, and its outputs: GPU-hours and energy over the replicas actually paid for, the
summary's `autoscaler` block and the time series' `replicas_*` columns."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from batchsim.experiment.schema import (
    Arm,
    AutoscalerConfig,
    DecodeScalerConfig,
    DisaggregatedArm,
    Experiment,
    PrefillScalerConfig,
)
from batchsim.metrics.autoscaling import STATES, active, autoscaler_metrics, bin_means, integral
from batchsim.metrics.energy import ReplicaGroup
from batchsim.sim.autoscaler import AutoscalerSettings
from batchsim.sim.engine import Simulation
from batchsim.sim.recorder import RunRecord
from batchsim.sim.replica_pool import ScaleTimeline


def autoscaler_of(arm: Arm) -> AutoscalerConfig | None:
    return None if isinstance(arm, DisaggregatedArm) else arm.autoscaler


def autoscaler_settings(
    config: AutoscalerConfig | PrefillScalerConfig | DecodeScalerConfig | None,
) -> AutoscalerSettings | None:
    """The kernel's settings of a colocated arm's autoscaler or of one disaggregated pool's."""
    if config is None:
        return None
    return AutoscalerSettings(
        min_replicas=config.min_replicas, max_replicas=config.max_replicas,
        initial_replicas=config.start_replicas, metric=config.metric, target=config.target,
        interval_s=config.interval_s, scale_up_window_s=config.scale_up_window_s,
        scale_down_window_s=config.scale_down_window_s, cold_start_s=config.cold_start_s)


def any_autoscaled(exp: Experiment) -> bool:
    """An arm of `exp`, colocated or disaggregated, has an autoscaler: every arm's time series
    then has the replica columns, so that the arms compare."""
    return any(arm.autoscaler is not None for arm in exp.policies)


def timeline_of(simulation: Simulation) -> ScaleTimeline | None:
    return None if simulation.pool is None else simulation.pool.timeline


def paid_groups(groups: list[ReplicaGroup], timeline: ScaleTimeline, start: float,
                end: float) -> list[ReplicaGroup]:
    """The arm's one group, paid for the replica-seconds its pool ran in [start, end]."""
    seconds = integral(timeline, active(timeline), start, end)
    return [replace(group, active_replica_s=seconds) for group in groups]


def add_autoscaler_metrics(metrics: dict[str, object], timeline: ScaleTimeline,
                           config: AutoscalerConfig, record: RunRecord, *, start: float,
                           end: float, run_end: float, gpus_per_replica: int) -> None:
    busy_s = record.steps.window_sums(start, end, range(record.num_replicas)).busy_s
    block: dict[str, object] = {"min_replicas": config.min_replicas,
                                "max_replicas": config.max_replicas}
    block.update(autoscaler_metrics(timeline, start=start, end=end, run_end=run_end,
                                    busy_s=busy_s, gpus_per_replica=gpus_per_replica))
    metrics["autoscaler"] = block


def with_replica_columns(timeseries: pd.DataFrame, timeline: ScaleTimeline | None,
                         replicas: int) -> pd.DataFrame:
    """The series with `replicas_serving`, `_starting`, `_draining` per bin: the pool's means,
    or a fixed arm's `replicas` serving throughout (so arms of one experiment compare)."""
    if not len(timeseries):
        return timeseries.assign(**{f"replicas_{s}": np.zeros(0) for s in STATES})
    if timeline is None:
        constant = {"serving": float(replicas), "starting": 0.0, "draining": 0.0}
        return timeseries.assign(**{f"replicas_{s}": constant[s] for s in STATES})
    starts = timeseries["t_start_s"].to_numpy()
    # The last bin ends where the next would start: its width is the one before it.
    width = starts[1] - starts[0] if len(starts) > 1 else 1.0
    means = bin_means(timeline, np.append(starts, starts[-1] + width))
    return timeseries.assign(**means, **_per_holding_replica(timeseries, means, replicas))


def _per_holding_replica(timeseries: pd.DataFrame, means: dict[str, np.ndarray],
                         slots: int) -> dict[str, np.ndarray]:
    """The per-replica columns over the replicas that could hold requests (serving or
    draining) rather than over every slot of the pool: the series divided Σ value × seconds
    by `slots` × the bin's width, this divides it by their replica-seconds instead."""
    holding = means["replicas_serving"] + means["replicas_draining"]
    scale = np.divide(float(slots), holding, out=np.zeros_like(holding), where=holding > 0)
    return {column: timeseries[column].to_numpy() * scale
            for column in PER_REPLICA_COLUMNS}


PER_REPLICA_COLUMNS = ("busy_fraction", "batch_size", "kv_utilization_mean")
