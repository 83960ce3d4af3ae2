"""A disaggregated arm's `autoscaler` (docs/how-to/autoscaling.md, "Disaggregated pools"): each
pool's settings for the kernel, and its outputs: the summary's `autoscaler.prefill` and
`autoscaler.decode` blocks (replicas over the window, GPU-hours, attainment of the pool's
latency target), the paid replica-seconds of each pool's group, and the time series'
`replicas_prefill_*` and `replicas_decode_*` columns (with their sums as `replicas_*`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from batchsim.experiment.autoscaling import PER_REPLICA_COLUMNS, autoscaler_settings
from batchsim.experiment.schema import (
    DecodeScalerConfig,
    DisaggregatedArm,
    Experiment,
    PrefillScalerConfig,
)
from batchsim.metrics.autoscaling import STATES, active, autoscaler_metrics, bin_means, integral
from batchsim.metrics.energy import ReplicaGroup
from batchsim.metrics.summary import measured_mask
from batchsim.sim.autoscaler import AutoscalerSettings
from batchsim.sim.disaggregated import DisaggregatedSimulation
from batchsim.sim.recorder import RunRecord
from batchsim.sim.replica_pool import ScaleTimeline

ROLES = ("prefill", "decode")
# The request column each pool's latency metric is judged on.
_TARGET_COLUMN = {"ttft": "ttft_s", "itl": "tpot_s"}


def pool_scalers(arm: DisaggregatedArm) -> tuple[AutoscalerSettings | None,
                                                 AutoscalerSettings | None]:
    scaler = arm.autoscaler
    if scaler is None:
        return None, None
    return autoscaler_settings(scaler.prefill), autoscaler_settings(scaler.decode)


def pool_slots(arm: DisaggregatedArm, role: str) -> int:
    """Replicas a pool is built with: its scaler's `max_replicas`, else the fixed count."""
    if arm.autoscaler is None:
        count: int = getattr(arm, f"{role}_replicas")
        return count
    config: PrefillScalerConfig | DecodeScalerConfig = getattr(arm.autoscaler, role)
    return config.max_replicas


def pool_timelines(simulation: DisaggregatedSimulation) -> dict[str, ScaleTimeline] | None:
    prefill, decode = simulation.pool, simulation.decode_pool
    if prefill is None or decode is None:
        return None
    return {"prefill": prefill.timeline, "decode": decode.timeline}


def paid_pool_groups(groups: list[ReplicaGroup], timelines: dict[str, ScaleTimeline],
                     start: float, end: float) -> list[ReplicaGroup]:
    """The prefill group then the decode group, each paid for the replica-seconds its pool
    ran in [start, end], cold starts and drains included."""
    return [replace(group, active_replica_s=integral(timelines[role], active(timelines[role]),
                                                     start, end))
            for group, role in zip(groups, ROLES, strict=True)]


def add_pool_scaler_metrics(metrics: dict[str, object], arm: DisaggregatedArm,
                            timelines: dict[str, ScaleTimeline], record: RunRecord,
                            requests: pd.DataFrame, exp: Experiment, *, end: float,
                            run_end: float, tensor_parallel: dict[str, int]) -> None:
    assert arm.autoscaler is not None
    start, first = exp.warmup_s, 0
    measured = measured_mask(requests, exp.warmup_s, exp.cooldown_s)
    block: dict[str, object] = {}
    for role in ROLES:
        config: PrefillScalerConfig | DecodeScalerConfig = getattr(arm.autoscaler, role)
        slots = range(first, first + config.max_replicas)
        first += config.max_replicas
        busy_s = record.steps.window_sums(start, end, slots).busy_s
        pool: dict[str, object] = {"metric": config.metric, "target": config.target,
                                   "min_replicas": config.min_replicas,
                                   "max_replicas": config.max_replicas}
        pool.update(autoscaler_metrics(timelines[role], start=start, end=end, run_end=run_end,
                                       busy_s=busy_s, gpus_per_replica=tensor_parallel[role]))
        pool["target_attainment"] = _attainment(requests, measured, config)
        block[role] = pool
    metrics["autoscaler"] = block


def _attainment(requests: pd.DataFrame, measured: np.ndarray,
                config: PrefillScalerConfig | DecodeScalerConfig) -> float | None:
    """The measured requests' share under the pool's latency target (a one-token request
    has no TPOT to miss); None for a load metric, which has no latency target."""
    column = _TARGET_COLUMN.get(config.metric)
    if column is None or not measured.any():
        return None
    values = requests[column].to_numpy()[measured]
    finished = requests["finished"].to_numpy()[measured]
    ok = finished & (np.isnan(values) | (values <= config.target))
    return float(ok.mean())


def with_pool_replica_columns(timeseries: pd.DataFrame,
                              timelines: dict[str, ScaleTimeline] | None,
                              fixed: dict[str, int]) -> pd.DataFrame:
    """`replicas_prefill_<state>`, `replicas_decode_<state>` and their sums `replicas_<state>`
    per bin; a fixed arm's pools serve throughout. As for a colocated pool, the per-replica
    columns are divided by the replicas that could hold requests."""
    if not len(timeseries):
        names = [f"replicas_{p}{s}" for p in ("", "prefill_", "decode_") for s in STATES]
        return timeseries.assign(**{name: np.zeros(0) for name in names})
    if timelines is None:
        constant: dict[str, float | np.ndarray] = {
            f"replicas_{role}_{s}": float(fixed[role]) if s == "serving" else 0.0
            for role in ROLES for s in STATES}
        constant.update({f"replicas_{s}": float(sum(fixed.values())) if s == "serving" else 0.0
                         for s in STATES})
        return timeseries.assign(**constant)
    starts = timeseries["t_start_s"].to_numpy()
    width = starts[1] - starts[0] if len(starts) > 1 else 1.0
    edges = np.append(starts, starts[-1] + width)
    per_pool = {role: bin_means(timelines[role], edges) for role in ROLES}
    columns: dict[str, float | np.ndarray] = {f"replicas_{role}_{name[len('replicas_'):]}": values
               for role, means in per_pool.items() for name, values in means.items()}
    totals = {f"replicas_{s}": per_pool["prefill"][f"replicas_{s}"]
              + per_pool["decode"][f"replicas_{s}"] for s in STATES}
    holding = totals["replicas_serving"] + totals["replicas_draining"]
    scale = np.divide(float(sum(fixed.values())), holding, out=np.zeros_like(holding),
                      where=holding > 0)
    rescaled = {c: timeseries[c].to_numpy() * scale for c in PER_REPLICA_COLUMNS}
    return timeseries.assign(**columns, **totals, **rescaled)
