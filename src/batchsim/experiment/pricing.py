"""Dollars per GPU-hour: which price of a `pricing` mapping applies to a GPU.

A price is keyed by the `hardware` string as written, the profile's canonical name, or any of
its aliases (`h100`, `h100-sxm` and `h100-sxm5` all price the same GPU). One lookup serves
`batchsim run` (the top-level `pricing`) and `batchsim plan` (`plan.price_per_gpu_hour`, else
`pricing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from batchsim.gpu.hardware import GpuProfile, load_gpu_profile


def price_for(hardware: str, gpu: GpuProfile, prices: Mapping[str, float]) -> float | None:
    """The price of `gpu` (written as `hardware` in the file), or None when none applies."""
    by_key = {key.strip().lower(): value for key, value in prices.items()}
    for name in (hardware.strip().lower(), gpu.name, *gpu.aliases):
        if name in by_key:
            return by_key[name]
    return None


def no_price_reason(hardware: str, key: str, prices: Mapping[str, float]) -> str:
    """Why a GPU has no cost: names the key to set and what is priced."""
    if not prices:
        return f"no price: set `{key}` (dollars per GPU-hour by hardware) to get a cost"
    return (f"no price for {hardware!r} in `{key}` (priced: {', '.join(sorted(prices))}); key "
            "it by the hardware as written, the profile name or an alias")


def price_by_spec(hardware: str, prices: Mapping[str, float], base_dir: Path | None = None
                  ) -> float | None:
    """`price_for` when only the hardware string is at hand: loads its profile for the
    name and aliases (only if the string itself is not a key)."""
    exact = {key.strip().lower(): value for key, value in prices.items()}
    if hardware.strip().lower() in exact:
        return exact[hardware.strip().lower()]
    return price_for(hardware, load_gpu_profile(hardware, base_dir), prices)
