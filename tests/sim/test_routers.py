"""Routers pick replicas by their state at the arrival instant; ties go to the lowest index."""

from __future__ import annotations

from policies.continuous import ContinuousBatching
from sim.kv_cache import KVBlockPool
from sim.request import Request
from sim.routers import least_kv, least_outstanding, round_robin


def _policy(queued: int, used_blocks: int) -> ContinuousBatching:
    policy = ContinuousBatching(pool=KVBlockPool(100, 16), max_num_seqs=8,
                                max_num_batched_tokens=4096)
    for i in range(queued):
        policy.add_request(Request(i, 0.0, 10, 10), 0.0)
    if used_blocks:
        assert policy.pool.allocate(999, used_blocks * 16)
    return policy


def test_round_robin_cycles() -> None:
    policies = [_policy(0, 0) for _ in range(3)]
    assert [round_robin(policies, n) for n in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_takes_the_shortest_queue_lowest_index_first() -> None:
    policies = [_policy(2, 0), _policy(1, 0), _policy(1, 0)]
    assert least_outstanding(policies, 0) == 1


def test_least_kv_takes_the_most_free_blocks() -> None:
    policies = [_policy(0, 50), _policy(5, 10), _policy(0, 30)]
    assert least_kv(policies, 0) == 1
