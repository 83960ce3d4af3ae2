"""What ranks the candidates that meet the SLO (`plan.objective`): dollars per hour, GPUs, or
joules per output token. Whichever is chosen, ties go to fewer GPUs, then the label."""

from __future__ import annotations

from typing import Any

from batchsim.experiment.loader import ConfigError
from batchsim.experiment.schema import PlanConfig
from batchsim.gpu.hardware import GpuProfile

COST, GPUS, ENERGY = "cost", "gpus", "energy"


def resolve_objective(plan: PlanConfig, prices: dict[str, float]) -> str:
    """The objective in force: the plan's, or cost when priced and GPUs otherwise."""
    if plan.objective is None:
        return COST if prices else GPUS
    if plan.objective == COST and not prices:
        raise ConfigError("plan.objective: `cost` needs prices; set plan.price_per_gpu_hour or "
                          "the top-level pricing (dollars per GPU-hour by hardware)")
    return plan.objective


def check_energy_profiles(objective: str, profiles: list[GpuProfile]) -> None:
    """`energy` ranks by joules, which a profile without `power` cannot give: fail early."""
    if objective != ENERGY:
        return
    for profile in profiles:
        if profile.power is None:
            raise ConfigError(f"plan.objective: `energy` needs GPU profiles with a `power` "
                              f"block; {profile.name} has none")


def objective_value(row: dict[str, Any], objective: str) -> float:
    """The number a candidate row is ranked by (smaller is better; GPUs break ties after)."""
    if objective == COST:
        return float(row["usd_per_hour"])
    if objective == ENERGY:
        joules = row.get("joules_per_output_token")
        return float(joules) if joules is not None else float("inf")
    return float(row["gpus"])
