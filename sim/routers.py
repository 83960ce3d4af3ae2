"""Routers: which replica an arriving request goes to (DESIGN §2).

A router sees the replicas' policies at the arrival instant and the arrival's sequence number;
ties go to the lowest replica index so that runs are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.policy_protocol import BatchingPolicy

Router = Callable[[Sequence[BatchingPolicy], int], int]


def round_robin(policies: Sequence[BatchingPolicy], sequence_number: int) -> int:
    return sequence_number % len(policies)


def least_outstanding(policies: Sequence[BatchingPolicy], sequence_number: int) -> int:
    """Fewest requests at the replica, queued plus running."""
    loads = [p.num_running + p.num_waiting for p in policies]
    return loads.index(min(loads))


def least_kv(policies: Sequence[BatchingPolicy], sequence_number: int) -> int:
    """Most free KV-cache blocks (the replica least likely to preempt)."""
    free = [p.pool.num_free for p in policies]
    return free.index(max(free))


ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
    "least_kv": least_kv,
}
