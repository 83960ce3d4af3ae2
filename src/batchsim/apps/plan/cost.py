"""What a configuration costs: GPUs × $/GPU-hour, and $ per million output tokens served."""

from __future__ import annotations

from batchsim.experiment.loader import ConfigError
from batchsim.experiment.pricing import price_by_spec
from batchsim.experiment.schema import Experiment, PlanConfig
from batchsim.gpu.hardware import HardwareError


def plan_prices(exp: Experiment, plan: PlanConfig) -> dict[str, float]:
    """The plan's own prices, else the experiment's top-level `pricing` (either may be {})."""
    return dict(plan.price_per_gpu_hour or exp.pricing)


def _price(hardware: str, prices: dict[str, float]) -> float | None:
    """The price of `hardware` by the string as written, else by its profile name or alias."""
    try:
        return price_by_spec(hardware, prices)
    except HardwareError:  # a profile path relative to the file: only the exact key applies
        return None


def cost_per_hour(gpus_by_hardware: dict[str, int], prices: dict[str, float]) -> float | None:
    """Dollars per hour, or None when the plan gives no prices (rank by GPUs instead)."""
    if not prices:
        return None
    found = {hardware: _price(hardware, prices) for hardware in gpus_by_hardware}
    missing = sorted(hardware for hardware, price in found.items() if price is None)
    if missing:
        raise ConfigError(f"plan.price_per_gpu_hour: no price for {', '.join(missing)} "
                          f"(priced: {', '.join(sorted(prices))})")
    return sum(count * (found[hardware] or 0.0) for hardware, count in gpus_by_hardware.items())


def usd_per_million_tokens(per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """The hourly cost spread over the output tokens served in that hour (measured rate)."""
    if per_hour is None or not tokens_per_s:
        return None
    return per_hour / (tokens_per_s * 3600.0) * 1e6
