"""Scorers of the weighted router: each turns what the router sees of every replica into one
score per replica in [0, 1], higher is better (docs/design.md §2, "Weighted routing").

The normalisations follow llm-d's scorers, so that weights mean the same across signals:
`prefix_cache` is the share of the arrival's cacheable prompt blocks cached at the replica
(`tiered_prefix_cache`: on its GPU or in any of its lower KV tiers, a hit either way);
`kv_use` the replica's free share of its KV blocks; `queue_depth` and `predicted_latency` are
min-max scaled across the replicas, (max - x) / (max - min), every replica 1 when all are equal.
Every score is a monotone function of one signal over a denominator shared by all replicas, so
one scorer alone ranks the replicas exactly as the matching single-signal router does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from batchsim.sim.latency_estimate import LatencyEstimate


@dataclass(frozen=True, slots=True)
class ReplicaSignals:
    """A replica as the weighted router sees it (possibly an old snapshot; sim/signal_view.py)."""

    outstanding: int  # requests queued or running
    running: int
    free_kv_blocks: int
    kv_blocks: int  # the replica's KV pool
    prefill_tokens_ahead: int = 0  # queued prompt tokens not yet computed
    cached_prefix_blocks: int = 0  # leading prompt blocks of the arrival cached there
    # The same, found on the GPU or in a lower KV tier; None: read no further than the GPU
    # (the replica has no tiers, or no scorer asks).
    tiered_prefix_blocks: int | None = None

    @property
    def prefix_blocks_anywhere(self) -> int:
        """Leading prompt blocks the replica would not compute: cached or in a tier."""
        tiered = self.tiered_prefix_blocks
        return self.cached_prefix_blocks if tiered is None else tiered


@dataclass(frozen=True, slots=True)
class ArrivalShape:
    """What a scorer knows of the arriving request."""

    prompt_tokens: int
    block_size: int

    @property
    def cacheable_blocks(self) -> int:
        # The last prompt token is always computed, so a cache can match one block fewer when
        # the prompt fills its blocks exactly (sim/engine.py `cached_prefix_blocks`).
        return (self.prompt_tokens - 1) // self.block_size


Scorer = Callable[[Sequence[ReplicaSignals], ArrivalShape, LatencyEstimate | None], list[float]]


def _low_is_good(values: Sequence[float]) -> list[float]:
    high, low = max(values), min(values)
    if high == low:
        return [1.0] * len(values)
    span = high - low
    return [(high - v) / span for v in values]


def _share_of_prompt(hits: Sequence[int], arrival: ArrivalShape) -> list[float]:
    blocks = arrival.cacheable_blocks
    if blocks <= 0:
        return [0.0] * len(hits)
    return [hit / blocks for hit in hits]


def prefix_cache(signals: Sequence[ReplicaSignals], arrival: ArrivalShape,
                 latency: LatencyEstimate | None) -> list[float]:
    return _share_of_prompt([s.cached_prefix_blocks for s in signals], arrival)


def tiered_prefix_cache(signals: Sequence[ReplicaSignals], arrival: ArrivalShape,
                        latency: LatencyEstimate | None) -> list[float]:
    return _share_of_prompt([s.prefix_blocks_anywhere for s in signals], arrival)


def queue_depth(signals: Sequence[ReplicaSignals], arrival: ArrivalShape,
                latency: LatencyEstimate | None) -> list[float]:
    return _low_is_good([s.outstanding for s in signals])


def kv_use(signals: Sequence[ReplicaSignals], arrival: ArrivalShape,
           latency: LatencyEstimate | None) -> list[float]:
    return [max(0, s.free_kv_blocks) / s.kv_blocks if s.kv_blocks > 0 else 0.0
            for s in signals]


def predicted_latency(signals: Sequence[ReplicaSignals], arrival: ArrivalShape,
                      latency: LatencyEstimate | None) -> list[float]:
    """The arrival's predicted wait (sim/latency_estimate.py): the prompt tokens ahead of it
    plus its own not cached there (on the GPU or a lower tier: a tier hit is loaded, not
    computed), and the running batch."""
    if latency is None:
        raise ValueError("the predicted_latency scorer needs the replicas' latency estimate")
    prompt = arrival.prompt_tokens
    size = arrival.block_size
    return _low_is_good([
        latency.wait_s(s.prefill_tokens_ahead
                       + max(0, prompt - s.prefix_blocks_anywhere * size), s.running)
        for s in signals])


SCORERS: dict[str, Scorer] = {
    "prefix_cache": prefix_cache,
    "tiered_prefix_cache": tiered_prefix_cache,
    "queue_depth": queue_depth,
    "kv_use": kv_use,
    "predicted_latency": predicted_latency,
}
