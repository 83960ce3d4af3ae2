"""The weighted router (docs/design.md §2): one scorer alone makes exactly the single-signal
router's decisions; ties go to the lowest index, or in turn when balanced."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from batchsim.sim.latency_estimate import LatencyEstimate
from batchsim.sim.routers import (
    ReplicaLoad,
    least_kv,
    least_outstanding,
    prefix_affinity,
)
from batchsim.sim.scorers import ArrivalShape, ReplicaSignals
from batchsim.sim.weighted_router import WeightedRouter

POOL = 1000
loads = st.lists(st.builds(ReplicaLoad, st.integers(0, 40), st.integers(0, POOL),
                           st.integers(0, 64)), min_size=1, max_size=6)
weights = st.floats(0.1, 10.0)


def _signals(replicas: list[ReplicaLoad]) -> list[ReplicaSignals]:
    return [ReplicaSignals(load.outstanding, 0, load.free_kv_blocks, POOL,
                           cached_prefix_blocks=load.cached_prefix_blocks) for load in replicas]


def _choose(router: WeightedRouter, replicas: list[ReplicaLoad], sequence: int) -> int:
    # 65 cacheable blocks: every generated cached prefix fits in the prompt.
    return router.choose(_signals(replicas), ArrivalShape(65 * 16 + 1, 16), sequence)


@given(replicas=loads, weight=weights, sequence=st.integers(0, 10**6))
def test_queue_depth_alone_is_least_outstanding(replicas, weight, sequence) -> None:
    router = WeightedRouter((("queue_depth", weight),))
    assert _choose(router, replicas, sequence) == least_outstanding(replicas, sequence)


@given(replicas=loads, weight=weights, sequence=st.integers(0, 10**6))
def test_kv_use_alone_is_least_kv(replicas, weight, sequence) -> None:
    router = WeightedRouter((("kv_use", weight),))
    assert _choose(router, replicas, sequence) == least_kv(replicas, sequence)


@given(replicas=loads, sequence=st.integers(0, 10**6))
def test_dominant_prefix_then_queue_is_prefix_affinity(replicas, sequence) -> None:
    """A prefix weight above the prompt's block count makes one more cached block outweigh any
    queue difference: the lexicographic order of `prefix_affinity`."""
    router = WeightedRouter((("prefix_cache", 1000.0), ("queue_depth", 1.0)))
    assert _choose(router, replicas, sequence) == prefix_affinity(replicas, sequence)


def test_ties_go_to_the_lowest_index_or_in_turn() -> None:
    replicas = [ReplicaLoad(3, 10), ReplicaLoad(1, 10), ReplicaLoad(2, 10), ReplicaLoad(1, 10)]
    plain = WeightedRouter((("queue_depth", 1.0),))
    balanced = WeightedRouter((("queue_depth", 1.0),), load_balance_ties=True)
    assert [_choose(plain, replicas, n) for n in range(4)] == [1, 1, 1, 1]
    assert [_choose(balanced, replicas, n) for n in range(4)] == [1, 3, 1, 3]


def test_weights_trade_signals() -> None:
    """Replica 0 has the cache hit (half the prompt), replica 1 the short queue."""
    signals = [ReplicaSignals(10, 0, 500, 1000, cached_prefix_blocks=4),
               ReplicaSignals(0, 0, 500, 1000)]
    arrival = ArrivalShape(9 * 16, 16)  # 8 cacheable blocks
    prefix_heavy = WeightedRouter((("prefix_cache", 3.0), ("queue_depth", 1.0)))
    load_heavy = WeightedRouter((("prefix_cache", 1.0), ("queue_depth", 1.0)))
    assert prefix_heavy.choose(signals, arrival, 0) == 0  # 1.5 against 1
    assert load_heavy.choose(signals, arrival, 0) == 1  # 0.5 against 1


def test_predicted_latency_counts_tokens_ahead_and_the_cache() -> None:
    latency = LatencyEstimate(prefill_s_per_token=1e-4, decode_s_per_seq=1e-3)
    router = WeightedRouter((("predicted_latency", 1.0),), latency=latency)
    arrival = ArrivalShape(1000, 100)
    # Waits: 0.1 + 0.1 = 0.2 s; 0.05 + 0.1 + 0.01 = 0.16 s; 0 + (1000 - 900) tokens = 0.01 s.
    signals = [ReplicaSignals(1, 0, 0, 1, prefill_tokens_ahead=1000),
               ReplicaSignals(2, 10, 0, 1, prefill_tokens_ahead=500),
               ReplicaSignals(9, 0, 0, 1, cached_prefix_blocks=9)]
    assert router.choose(signals, arrival, 0) == 2
    assert router.choose(signals[:2], arrival, 0) == 1
