"""Lower KV tier outputs (docs/how-to/tiered-kv.md): each request's prompt tokens loaded from
each tier, the hit rate by tier, and what the tiers moved.

Hit rates are over the measured requests that were admitted, as `prefix_cache`'s are (blocks
found on a first admission over full prompt blocks), so the GPU's and the tiers' add up to its
`hit_rate_blocks`. What the tiers moved and the load time are the whole run's, summed over the
replicas: a block offloaded in the warm-up may be loaded in the window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from batchsim.sim.kv_tiers import KVTier
from batchsim.sim.request import Request


def tier_column(kind: str) -> str:
    return f"cached_tokens_{kind}"


def add_tier_cached_tokens(requests: pd.DataFrame, recorded: list[Request],
                           kinds: list[str]) -> pd.DataFrame:
    """requests.parquet's `cached_tokens_<kind>` columns: of `cached_tokens`, those each
    tier gave the request on its first admission."""
    counts = np.zeros((len(recorded), len(kinds)), dtype=np.int64)
    for row, request in enumerate(recorded):
        if request.tier_cached_tokens:
            counts[row] = request.tier_cached_tokens
    return requests.assign(**{tier_column(kind): counts[:, index]
                              for index, kind in enumerate(kinds)})


def kv_tier_metrics(requests: pd.DataFrame, measured: np.ndarray, block_size: int,
                    replica_tiers: list[list[KVTier]], block_bytes: float,
                    ) -> dict[str, object]:
    """`kv_tiers` in summary.json: the hit rate of the GPU and of each tier, and per tier its
    capacity, hit rate, blocks and bytes moved and load seconds."""
    admitted = measured & ~np.isnan(requests["first_scheduled_s"].to_numpy())
    full_blocks = int((requests["prompt_tokens"].to_numpy()[admitted] // block_size).sum())

    def rate(tokens: np.ndarray) -> float | None:
        return float((tokens // block_size).sum() / full_blocks) if full_blocks else None

    kinds = [tier.kind for tier in replica_tiers[0]]
    from_tiers = {kind: requests[tier_column(kind)].to_numpy()[admitted] for kind in kinds}
    on_gpu = requests["cached_tokens"].to_numpy()[admitted] - sum(from_tiers.values())
    per_tier: dict[str, dict[str, float | int | None]] = {}
    for index, kind in enumerate(kinds):
        tiers = [replica[index] for replica in replica_tiers]
        stored = sum(tier.blocks_stored for tier in tiers)
        loaded = sum(tier.blocks_loaded for tier in tiers)
        per_tier[kind] = {
            "capacity_blocks": tiers[0].capacity_blocks,
            "hit_rate_blocks": rate(from_tiers[kind]),
            "blocks_stored": stored, "blocks_loaded": loaded,
            "blocks_evicted": sum(tier.blocks_evicted for tier in tiers),
            "bytes_stored": stored * block_bytes, "bytes_loaded": loaded * block_bytes,
            "load_s": float(sum(tier.load_seconds for tier in tiers)),
        }
    return {
        "gpu_hit_rate_blocks": rate(on_gpu),
        "tiers": per_tier,
        "bytes_moved": float(sum(t["bytes_stored"] or 0 for t in per_tier.values())
                             + sum(t["bytes_loaded"] or 0 for t in per_tier.values())),
        "load_s": float(sum(t["load_s"] or 0 for t in per_tier.values())),
    }
