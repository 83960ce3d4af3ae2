"""The experiment's `router` key as the kernel's router (docs/how-to/routing.md)."""

from __future__ import annotations

from batchsim.experiment.schema.router import RouterConfig
from batchsim.sim.cost_protocol import StepCostModel
from batchsim.sim.latency_estimate import LatencyEstimate
from batchsim.sim.routers import ROUTERS, Router
from batchsim.sim.weighted_router import WeightedRouter


def build_router(config: RouterConfig, cost_model: StepCostModel) -> Router | WeightedRouter | None:
    """None for `shared_queue` (no router: one central queue); `cost_model` prices the
    routed replicas' steps, for the predicted-latency scorer."""
    if config == "shared_queue":
        return None
    if isinstance(config, str):
        return ROUTERS[config]
    scorers = tuple((scorer.kind, scorer.weight) for scorer in config.scorers)
    needs_latency = any(kind == "predicted_latency" for kind, _ in scorers)
    return WeightedRouter(scorers, signal_delay_s=config.signal_delay_s,
                          count_own_assignments=config.count_own_assignments,
                          load_balance_ties=config.load_balance_ties,
                          latency=LatencyEstimate.of(cost_model) if needs_latency else None)
