"""Routers pick replicas by their load at the arrival instant; ties go to the lowest index."""

from __future__ import annotations

from batchsim.sim.routers import (
    ReplicaLoad,
    least_kv,
    least_outstanding,
    prefix_affinity,
    round_robin,
)


def test_round_robin_cycles() -> None:
    loads = [ReplicaLoad(0, 10)] * 3
    assert [round_robin(loads, n) for n in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_takes_the_shortest_queue_lowest_index_first() -> None:
    loads = [ReplicaLoad(2, 90), ReplicaLoad(1, 10), ReplicaLoad(1, 50)]
    assert least_outstanding(loads, 0) == 1


def test_least_kv_takes_the_most_free_blocks() -> None:
    loads = [ReplicaLoad(0, 50), ReplicaLoad(5, 90), ReplicaLoad(0, 90)]
    assert least_kv(loads, 0) == 1


def test_prefix_affinity_prefers_the_longest_cached_prefix_then_the_least_loaded() -> None:
    loads = [ReplicaLoad(1, 10, 3), ReplicaLoad(5, 10, 7), ReplicaLoad(2, 10, 7)]
    assert prefix_affinity(loads, 0) == 2
    cold = [ReplicaLoad(4, 10, 0), ReplicaLoad(2, 10, 0), ReplicaLoad(2, 10, 0)]
    assert prefix_affinity(cold, 0) == 1
