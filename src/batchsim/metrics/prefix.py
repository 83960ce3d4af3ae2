"""Prefix-cache outputs (docs/design.md §3): each request's cached prompt tokens, and the hit rates.

A hit rate is over the measured requests that were admitted (served at least once): cached
prompt tokens over their prompt tokens, and cached blocks over their full prompt blocks (the
blocks that could have been cached at all).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from batchsim.sim.request import Request


def add_cached_tokens(requests: pd.DataFrame, recorded: list[Request]) -> pd.DataFrame:
    """requests.parquet's `cached_tokens` column: prompt tokens found cached on admission."""
    cached = np.fromiter((r.cached_tokens for r in recorded), dtype=np.int64,
                         count=len(recorded))
    return requests.assign(cached_tokens=cached)


def prefix_cache_metrics(requests: pd.DataFrame, measured: np.ndarray,
                         block_size: int) -> dict[str, float | int | None]:
    admitted = measured & ~np.isnan(requests["first_scheduled_s"].to_numpy())
    prompt = requests["prompt_tokens"].to_numpy()[admitted]
    cached = requests["cached_tokens"].to_numpy()[admitted]
    full_blocks = int((prompt // block_size).sum())
    return {
        "cached_tokens": int(cached.sum()),
        "hit_rate_tokens": float(cached.sum() / prompt.sum()) if prompt.sum() else None,
        "hit_rate_blocks": (float((cached // block_size).sum() / full_blocks)
                            if full_blocks else None),
    }
