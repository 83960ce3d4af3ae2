"""A replica's lower KV tiers from the experiment's (docs/how-to/tiered-kv.md): the schema's
tiers in blocks and seconds per block, and the swap space a CPU tier provides."""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.experiment.schema.kv_tiers import KVTierConfig
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.kv_tiered_pool import TieredKVBlockPool, TierSwapSpace
from batchsim.sim.kv_tiers import KVTier

_GB = 1e9


@dataclass(frozen=True, slots=True)
class TierSizing:
    """What turns tiers in GB into blocks: one KV block's bytes per GPU, and the layers a
    layer-wise load overlaps (1: loads block the step)."""

    block_bytes: float
    layers: int = 1


def build_tiers(configs: list[KVTierConfig], block_bytes: float) -> list[KVTier]:
    """Fresh tiers (a replica's own state) of `configs`, sized in blocks of `block_bytes`."""
    return [KVTier(kind=config.kind,
                   capacity_blocks=int(config.capacity_gb * _GB // block_bytes),
                   seconds_per_block=(0.0 if config.bandwidth_gb_s is None
                                      else block_bytes / (config.bandwidth_gb_s * _GB)))
            for config in configs]


def swap_space_for(pool: KVBlockPool, swap_blocks: int) -> HostSwapSpace:
    """Host swap space: inside the first tier when it is a CPU tier, else its own."""
    if isinstance(pool, TieredKVBlockPool) and pool.tiers.tiers[0].kind == "cpu":
        return TierSwapSpace(pool.tiers)
    return HostSwapSpace(swap_blocks)


def replica_tiers(simulation: object) -> list[list[KVTier]]:
    """Each replica's tiers, for the metrics; empty when its pools have none (a disaggregated
    arm's pools cache no prefixes)."""
    replicas = getattr(simulation, "replicas", ())
    return [replica.policy.pool.tiers.tiers for replica in replicas
            if isinstance(replica.policy.pool, TieredKVBlockPool)]
