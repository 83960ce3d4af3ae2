"""Lower KV tiers (sim/kv_tiers.py, sim/kv_tiered_pool.py): the cascade, loads priced at
bytes over bandwidth, swap pinned in a CPU tier, and the pool's invariants under random use."""

import copy

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from batchsim.experiment.kv_tier_setup import build_tiers
from batchsim.experiment.schema.kv_tiers import KVTierConfig
from batchsim.sim.kv_tiered_pool import TieredKVBlockPool, TierSwapSpace
from batchsim.sim.kv_tiers import KVTier, KVTierError, KVTierStack
from batchsim.sim.step_plan import StepPlan


def _tier(kind: str, capacity: int, seconds: float = 0.0) -> KVTier:
    return KVTier(kind=kind, capacity_blocks=capacity, seconds_per_block=seconds)


def test_an_offload_cascades_least_recently_used_keys_down_and_out() -> None:
    stack = KVTierStack([_tier("cpu", 2), _tier("disk", 2)])
    for key in (1, 2, 3, 4, 5):
        stack.offload(key)
    assert list(stack.tiers[0].keys) == [4, 5]
    assert list(stack.tiers[1].keys) == [2, 3]  # 1 fell out of the last tier
    assert stack.tiers[1].blocks_evicted == 1
    assert [stack.find(key) for key in (1, 2, 5)] == [-1, 1, 0]


def test_a_zero_capacity_tier_is_passed_over() -> None:
    stack = KVTierStack([_tier("cpu", 0), _tier("disk", 1)])
    stack.offload(7)
    assert stack.find(7) == 1 and stack.tiers[0].blocks_stored == 0


def test_loading_costs_bytes_over_bandwidth() -> None:
    # 2 MB blocks at 10 GB/s: 0.2 ms a block. Four cached blocks are evicted by another
    # request's four fresh ones, and a third request finds three of them in the CPU tier.
    [cpu] = build_tiers([KVTierConfig(kind="cpu", capacity_gb=1.0, bandwidth_gb_s=10.0)],
                        block_bytes=2e6)
    assert cpu.capacity_blocks == 500
    assert cpu.seconds_per_block == pytest.approx(2e-4, rel=1e-12)
    pool = TieredKVBlockPool(4, 16, [cpu])
    keys = (11, 12, 13, 14)
    assert pool.allocate(0, 64)
    pool.free(0, keys, 64)
    assert pool.allocate(1, 64)  # evicts the four cached blocks into the tier
    pool.free(1)
    assert list(cpu.keys) == [14, 13, 12, 11]  # freed tail first, evicted in that order
    assert pool.cached_prefix_blocks(keys, 3) == 0  # the router's view: the GPU's own
    assert pool.prefix_hit_blocks(keys, 3) == 3
    assert pool.allocate_with_prefix(2, keys[:3], 3 * 16 + 16)
    load, hits = pool.take_load()
    assert load == pytest.approx(6e-4, rel=1e-12) and hits == [3]
    assert list(cpu.keys) == [14] and cpu.blocks_loaded == 3
    assert pool.take_load() == (0.0, [0])
    pool.check_invariants()


def test_a_layerwise_load_overlaps_the_compute_as_a_two_stage_pipeline() -> None:
    plan = StepPlan(load_seconds=0.6e-3)
    assert plan.with_loads(1.0e-3) == pytest.approx(1.6e-3, rel=1e-12)  # blocking
    plan.load_layers = 4  # per layer 0.15 ms load, 0.25 ms compute
    assert plan.with_loads(1.0e-3) == pytest.approx((0.15 + 3 * 0.25 + 0.25) * 1e-3, rel=1e-12)
    plan.load_seconds = 4.0e-3  # load-bound: per layer 1 ms load, 0.25 ms compute
    assert plan.with_loads(1.0e-3) == pytest.approx((1 + 3 * 1 + 0.25) * 1e-3, rel=1e-12)


def test_swapped_blocks_are_pinned_in_the_cpu_tier_and_push_cached_keys_down() -> None:
    stack = KVTierStack([_tier("cpu", 4), _tier("disk", 4)])
    for key in (1, 2, 3):
        stack.offload(key)
    swap = TierSwapSpace(stack)
    assert swap.try_store(9, 2)
    assert list(stack.tiers[0].keys) == [2, 3] and list(stack.tiers[1].keys) == [1]
    assert not swap.try_store(8, 3)  # 2 + 3 pinned > 4
    stack.offload(4)  # the room is the capacity less the pinned blocks
    assert list(stack.tiers[0].keys) == [3, 4] and list(stack.tiers[1].keys) == [1, 2]
    assert swap.release(9) == 2 and stack.tiers[0].pinned == 0
    with pytest.raises(KVTierError):
        stack.unpin(1)


DOCS = 3  # prompts are leading runs of one of a few documents' keys


class TieredPoolMachine(RuleBasedStateMachine):
    """Requests share prefixes of a few documents on a small pool over two small tiers."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = TieredKVBlockPool(12, 4, [_tier("cpu", 5, 1e-3), _tier("disk", 7, 1e-2)])
        self.keys: dict[int, tuple[int, ...]] = {}
        self.swap = TierSwapSpace(self.pool.tiers)
        self.swapped: set[int] = set()

    @rule(owner=st.integers(0, 5), doc=st.integers(0, DOCS - 1), blocks=st.integers(1, 8))
    def admit(self, owner: int, doc: int, blocks: int) -> None:
        if owner in self.pool.owners():
            return
        keys = tuple(doc * 100 + index for index in range(blocks))
        hits = self.pool.prefix_hit_blocks(keys, blocks - 1)
        free_before = self.pool.num_free
        in_tiers = sum(1 for key in keys[:hits] if self.pool.tiers.find(key) >= 0)
        if self.pool.allocate_with_prefix(owner, keys[:hits], blocks * 4):
            load, per_tier = self.pool.take_load()
            assert sum(per_tier) == in_tiers
            assert all(self.pool.tiers.find(key) < 0 for key in keys[:hits])  # now on the GPU
            assert load == pytest.approx(per_tier[0] * 1e-3 + per_tier[1] * 1e-2)
            self.pool.cache_blocks(owner, keys, blocks * 4)
            self.keys[owner] = keys
            assert self.pool.held(owner) == blocks
        else:
            assert self.pool.num_free == free_before and self.pool.take_load()[1] == [0, 0]

    @precondition(lambda self: bool(self.pool.owners()))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.pool.owners())))
        keys = self.keys.pop(owner)
        self.pool.free(owner, keys, len(keys) * 4)

    @rule(owner=st.integers(10, 13), blocks=st.integers(1, 6))
    def swap_out_or_in(self, owner: int, blocks: int) -> None:
        if owner in self.swapped:
            self.swap.release(owner)
            self.swapped.discard(owner)
        elif self.swap.try_store(owner, blocks):
            self.swapped.add(owner)

    @rule(doc=st.integers(0, DOCS - 1), blocks=st.integers(2, 8), data=st.data())
    def tiered_lookup_sees_evictions_not_yet_applied(self, doc: int, blocks: int,
                                                     data: st.DataObject) -> None:
        """The router's tiered lookup mid-stretch: what evicting the first `evicted`
        evictable blocks would leave, found without evicting them."""
        pool = self.pool
        evicted = data.draw(st.integers(0, pool.num_free - len(pool._free)))
        keys = tuple(doc * 100 + index for index in range(blocks))
        seen = pool.tiered_prefix_blocks(keys, blocks - 1, evicted)
        after = copy.deepcopy(pool)
        after._take(len(after._free) + evicted)
        assert seen == after.prefix_hit_blocks(keys, blocks - 1)
        if not evicted:
            assert seen == pool.prefix_hit_blocks(keys, blocks - 1)

    @invariant()
    def blocks_live_in_one_place_within_capacities(self) -> None:
        self.pool.check_invariants()  # the GPU pool's, and the tiers' against its keys
        cpu = self.pool.tiers.tiers[0]
        assert cpu.pinned == self.swap.num_used


TestTieredPool = TieredPoolMachine.TestCase
TestTieredPool.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
