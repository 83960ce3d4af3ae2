"""The block pool under random allocate/free sequences: no leaks, no double frees."""

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool, KVCacheError


class BlockPoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool = KVBlockPool(num_blocks=40, block_size=16)
        self.tokens: dict[int, int] = {}  # the model: tokens each owner asked to hold

    @rule(owner=st.integers(0, 7), tokens=st.integers(1, 400))
    def allocate(self, owner: int, tokens: int) -> None:
        held_before = self.pool.held(owner)
        free_before = self.pool.num_free
        ok = self.pool.allocate(owner, tokens)
        wanted = max(held_before, -(-tokens // 16))
        if ok:
            assert self.pool.held(owner) == wanted
            assert self.pool.num_free == free_before - (wanted - held_before)
            self.tokens[owner] = max(self.tokens.get(owner, 0), tokens)
        else:
            assert wanted - held_before > free_before
            assert self.pool.held(owner) == held_before
            assert self.pool.num_free == free_before

    @precondition(lambda self: bool(self.pool.owners()))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.pool.owners())))
        held = self.pool.held(owner)
        assert self.pool.free(owner) == held
        self.tokens.pop(owner, None)
        with pytest.raises(KVCacheError):
            self.pool.free(owner)

    @invariant()
    def every_block_accounted_for(self) -> None:
        self.pool.check_invariants()
        assert self.pool.num_used == sum(self.pool.held(o) for o in self.pool.owners())


TestBlockPool = BlockPoolMachine.TestCase


def test_freeing_a_request_that_holds_nothing_is_an_error() -> None:
    pool = KVBlockPool(4, 16)
    with pytest.raises(KVCacheError):
        pool.free(3)


def test_host_swap_space_respects_capacity() -> None:
    swap = HostSwapSpace(capacity_blocks=10)
    assert swap.try_store(1, 6)
    assert not swap.try_store(2, 5)
    assert swap.release(1) == 6
    assert swap.try_store(2, 5)
    with pytest.raises(KVCacheError):
        swap.release(1)
