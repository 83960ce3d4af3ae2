"""What a configuration costs: GPUs × $/GPU-hour, and $ per million output tokens served."""

from __future__ import annotations

from batchsim.config_loader import ConfigError


def cost_per_hour(gpus_by_hardware: dict[str, int], prices: dict[str, float]) -> float | None:
    """Dollars per hour, or None when the plan gives no prices (rank by GPUs instead)."""
    if not prices:
        return None
    missing = sorted(set(gpus_by_hardware) - set(prices))
    if missing:
        raise ConfigError(f"plan.price_per_gpu_hour: no price for {', '.join(missing)} "
                          f"(priced: {', '.join(sorted(prices))})")
    return sum(count * prices[hardware] for hardware, count in gpus_by_hardware.items())


def usd_per_million_tokens(per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """The hourly cost spread over the output tokens served in that hour (measured rate)."""
    if per_hour is None or not tokens_per_s:
        return None
    return per_hour / (tokens_per_s * 3600.0) * 1e6
