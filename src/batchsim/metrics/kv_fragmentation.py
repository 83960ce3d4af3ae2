"""The summary's `kv_fragmentation`: KV memory reserved but unused (internal) and free but
unusable (external), from the replicas' meters (sim/kv_fragmentation.py).

Shares are of the KV cache's capacity in tokens. Means are over the whole run's steps, each
weighted by its seconds (the replica's busy time; an idle replica holds no KV), summed over
the replicas; peaks are the largest single step's on any replica. The measurement window
does not apply: a fragmented address space is the history of every earlier admission.
"""

from __future__ import annotations

from batchsim.sim.recorder import RunRecord


def kv_fragmentation(record: RunRecord) -> dict[str, object] | None:
    """None when no replica was metered (a disaggregated arm's pools hand KV over).

    `mean_sequences` and `max_sequences` count the requests holding KV on one replica (the
    mean weighted by every replica's busy seconds): the concurrency the cache sustained."""
    meters = record.kv_fragmentation
    if not meters:
        return None
    busy_token_s = sum(m.busy_s * m.capacity_tokens for m in meters)
    return {
        "allocation": meters[0].pool.allocation,
        "internal_share_mean": _share(sum(m.internal_token_s for m in meters), busy_token_s),
        "internal_share_peak": max(m.internal_peak / m.capacity_tokens for m in meters),
        "internal_tokens_mean": _share(sum(m.internal_token_s for m in meters),
                                       sum(m.busy_s for m in meters)),
        "external_share_mean": _share(sum(m.external_token_s for m in meters), busy_token_s),
        "external_share_peak": max(m.external_peak / m.capacity_tokens for m in meters),
        "requests_refused_by_fragmentation": sum(m.refused_by_fragmentation for m in meters),
        "mean_sequences": _share(sum(m.sequence_s for m in meters),
                                 sum(m.busy_s for m in meters)),
        "max_sequences": max(m.max_sequences for m in meters),
    }


def _share(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0

