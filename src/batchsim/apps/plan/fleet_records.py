"""What a fleet paid and how well it served (plan.json's `autoscaling`): GPU-hours over the
measured window as the run's summary integrates them (replicas × GPUs × seconds, an
autoscaled pool's over its paid replicas), priced at the plan's $/GPU-hour, per million output
tokens served, and the SLO attainment; ranked as the candidates are."""

from __future__ import annotations

import math
from typing import Any

from batchsim.apps.plan.cost import cost_per_hour
from batchsim.apps.plan.evaluate import DOES_NOT_FIT, MEETS, Evaluation
from batchsim.apps.plan.objective import COST, ENERGY

_STATUS_ORDER = {MEETS: 0, DOES_NOT_FIT: 2}  # anything else (misses) is 1


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _paid_replicas(metrics: dict[str, Any], replicas: int) -> float:
    """Replicas paid for on average over the window: an autoscaled pool's mean, or all."""
    block = metrics.get("autoscaler")
    return float(block["active_mean"]) if isinstance(block, dict) else float(replicas)


def fleet_row(evaluation: Evaluation, prices: dict[str, float]) -> dict[str, Any]:
    """GPU-hours, dollars, $ per million output tokens, attainment and replicas paid, as
    means over the replications (null for a fleet that did not run)."""
    setup = evaluation.setup
    (hardware,) = setup.gpus_by_hardware
    price = cost_per_hour({hardware: 1}, prices)  # $ per GPU-hour, or None unpriced
    runs = evaluation.runs
    gpu_hours = _mean([float(r.metrics["cost"]["gpu_hours"]) for r in runs])
    tokens = _mean([float(r.metrics["output_throughput_tps"]) * float(r.metrics["window_s"])
                    for r in runs])
    usd = gpu_hours * price if gpu_hours is not None and price is not None else None
    attainment = [r.metrics["slo_attainment"] for r in runs]
    per_replica = setup.deployment["tensor_parallel"] * setup.deployment["pipeline_parallel"]
    paid = [_paid_replicas(r.metrics, setup.gpus // per_replica) for r in runs]
    window_s = _mean([float(r.metrics["window_s"]) for r in runs])
    # These replace the candidates' figures, which price every slot for the whole window.
    return {
        "kind": setup.extra["fleet"],
        "gpu_hours": gpu_hours, "usd": usd,
        "usd_per_hour": usd / window_s * 3600.0 if usd is not None and window_s else None,
        "usd_per_million_output_tokens": (usd / tokens * 1e6 if usd is not None and tokens
                                          else None),
        "tokens_per_s_per_gpu": (tokens / (gpu_hours * 3600.0) if tokens and gpu_hours
                                 else None),
        "slo_attainment": (_mean([float(a) for a in attainment])
                           if attainment and None not in attainment else None),
        "replicas_paid_mean": _mean(paid), "window_s": window_s,
    }


def rank_fleets(rows: list[dict[str, Any]], objective: str) -> list[dict[str, Any]]:
    """Best first: those that meet the SLO by the objective (dollars paid, GPU-hours for
    `gpus`, joules per output token), then those that miss, then those that do not fit; ties
    by GPU-hours, then label."""
    def value(row: dict[str, Any]) -> float:
        key = {COST: "usd", ENERGY: "joules_per_output_token"}.get(objective, "gpu_hours")
        number = row.get(key)
        return math.inf if number is None else float(number)

    ranked = sorted(rows, key=lambda row: (
        _STATUS_ORDER.get(row["status"], 1), value(row),
        math.inf if row["gpu_hours"] is None else row["gpu_hours"], row["label"]))
    for position, row in enumerate(ranked, start=1):
        row["rank"] = position
    return ranked
