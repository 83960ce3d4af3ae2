"""The weighted router: a weighted sum of scorers, argmax, deterministic ties (docs/design.md
§2, "Weighted routing"). What it sees of the replicas, and how old, is sim/signal_view.py's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from batchsim.sim.latency_estimate import LatencyEstimate
from batchsim.sim.scorers import SCORERS, ArrivalShape, ReplicaSignals


@dataclass(frozen=True, slots=True)
class WeightedRouter:
    """`scorers`: (kind, weight) pairs, kinds from `SCORERS`.

    `signal_delay_s`: replica load is read from a snapshot refreshed every this many seconds
    (0: the exact state at each arrival). `count_own_assignments`: add the requests this router
    sent since the snapshot to it, as llm-d counts its in-flight requests.
    `load_balance_ties`: among replicas tied for the best score, take them in turn by the
    arrival's sequence number instead of the lowest index."""

    scorers: tuple[tuple[str, float], ...]
    signal_delay_s: float = 0.0
    count_own_assignments: bool = False
    load_balance_ties: bool = False
    latency: LatencyEstimate | None = None

    def __post_init__(self) -> None:
        unknown = [kind for kind, _ in self.scorers if kind not in SCORERS]
        if unknown or not self.scorers:
            raise ValueError(f"unknown or no scorers {unknown}; known: {sorted(SCORERS)}")
        if self.signal_delay_s < 0:
            raise ValueError("signal_delay_s must be >= 0")

    @property
    def needs_tiered_prefix(self) -> bool:
        return any(kind in ("tiered_prefix_cache", "predicted_latency")
                   for kind, _ in self.scorers)

    @property
    def needs_queued_tokens(self) -> bool:
        return any(kind == "predicted_latency" for kind, _ in self.scorers)

    def choose(self, signals: Sequence[ReplicaSignals], arrival: ArrivalShape,
               sequence_number: int) -> int:
        totals = [0.0] * len(signals)
        for kind, weight in self.scorers:
            for i, score in enumerate(SCORERS[kind](signals, arrival, self.latency)):
                totals[i] += weight * score
        best = max(totals)
        if not self.load_balance_ties:
            return totals.index(best)
        ties = [i for i, total in enumerate(totals) if total == best]
        return ties[sequence_number % len(ties)]
