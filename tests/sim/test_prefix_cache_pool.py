"""The block pool with prefix caching: reuse, reference counts, LRU eviction, invariants."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from batchsim.sim.kv_cache import KVBlockPool, pool_block_keys


def _pool(num_blocks: int = 8) -> KVBlockPool:
    return KVBlockPool(num_blocks, block_size=4, prefix_caching=True)


def test_a_finished_requests_full_blocks_stay_cached_and_count_as_free() -> None:
    pool = _pool()
    assert pool.allocate(1, 10)  # 3 blocks, 2 of them full
    pool.free(1, keys=(11, 12, 13), computed_tokens=10)
    assert pool.num_cached == 2 and pool.num_free == 8
    assert pool.cached_prefix_blocks((11, 12, 99), limit=3) == 2
    assert pool.cached_prefix_blocks((99, 11), limit=2) == 0  # leading blocks only
    pool.check_invariants()


def test_a_reused_block_is_shared_and_not_evictable() -> None:
    pool = _pool()
    pool.allocate(1, 8)
    pool.free(1, keys=(11, 12), computed_tokens=8)
    assert pool.allocate_with_prefix(2, (11, 12), 12)  # 2 shared + 1 fresh
    assert pool.allocate_with_prefix(3, (11,), 4)
    assert pool.num_free == 5  # 8 - 2 shared - 1 fresh
    pool.check_invariants()
    pool.free(2, keys=(11, 12), computed_tokens=12)
    pool.free(3, keys=(11,), computed_tokens=4)
    assert pool.num_free == 8 and pool.num_cached == 2
    pool.check_invariants()


def test_allocation_evicts_the_least_recently_released_block_first() -> None:
    pool = _pool(num_blocks=3)
    for owner in (1, 2, 3):
        pool.allocate(owner, 4)
    for owner, key in ((2, 22), (1, 21), (3, 23)):
        pool.free(owner, keys=(key,), computed_tokens=4)
    assert pool.allocate(4, 4)  # evicts key 22, released first
    assert pool.cached_prefix_blocks((22,), 1) == 0
    assert pool.cached_prefix_blocks((21,), 1) == pool.cached_prefix_blocks((23,), 1) == 1
    pool.check_invariants()


def test_uncomputed_blocks_are_not_cached_and_duplicates_are_freed() -> None:
    pool = _pool()
    pool.allocate(1, 8)
    pool.allocate(2, 8)
    pool.free(1, keys=(31, 32), computed_tokens=4)  # the second block never ran
    assert pool.num_cached == 1
    pool.free(2, keys=(31, 32), computed_tokens=8)  # 31 is already cached: a duplicate
    assert pool.num_cached == 2 and pool.num_free == 8
    pool.check_invariants()


def test_admission_that_cannot_fit_changes_nothing() -> None:
    pool = _pool(num_blocks=3)
    pool.allocate(1, 4)
    pool.free(1, keys=(41,), computed_tokens=4)
    pool.allocate(2, 8)
    # one evictable block revived and 1 fresh would need 2 blocks; only the revived one is left
    assert not pool.allocate_with_prefix(3, (41,), 8)
    assert pool.num_free == 1 and pool.held(3) == 0
    pool.check_invariants()


def test_pool_block_keys_name_the_prefix_at_any_block_size() -> None:
    ids = np.array([7, 8], dtype=np.int64)
    keys = pool_block_keys(ids, block_tokens=512, pool_block_size=16, prompt_tokens=600)
    assert len(keys) == 600 // 16  # only full blocks inside the prompt
    other = pool_block_keys(np.array([7, 9]), 512, 16, 1024)
    assert keys[:32] == other[:32] and keys[32] != other[32]  # shared while ids agree
    coarse = pool_block_keys(ids, block_tokens=512, pool_block_size=1024, prompt_tokens=1024)
    assert len(coarse) == 1


class PrefixPoolMachine(RuleBasedStateMachine):
    """Random admissions with prefixes from a few shared chains, releases and growth: the
    invariants hold and every allocation is all or nothing against `num_free`."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = KVBlockPool(num_blocks=24, block_size=4, prefix_caching=True)
        self.keys: dict[int, tuple[int, ...]] = {}
        self.tokens: dict[int, int] = {}
        self.next_owner = 0

    @rule(chain=st.integers(0, 2), length=st.integers(1, 10), extra=st.integers(1, 9))
    def admit(self, chain: int, length: int, extra: int) -> None:
        keys = tuple(chain * 100 + i for i in range(length))
        cached = self.pool.cached_prefix_blocks(keys, length)
        free = self.pool.num_free
        owner = self.next_owner
        self.next_owner += 1
        total = cached * 4 + extra
        if self.pool.allocate_with_prefix(owner, keys[:cached], total):
            self.keys[owner], self.tokens[owner] = keys, total
            assert self.pool.held(owner) == -(-total // 4)
        else:
            assert self.pool.num_free == free and self.pool.held(owner) == 0

    @precondition(lambda self: bool(self.tokens))
    @rule(data=st.data(), more=st.integers(1, 12))
    def grow(self, data: st.DataObject, more: int) -> None:
        owner = data.draw(st.sampled_from(sorted(self.tokens)))
        free, held = self.pool.num_free, self.pool.held(owner)
        need = max(0, -(-(self.tokens[owner] + more) // 4) - held)
        assert self.pool.allocate(owner, self.tokens[owner] + more) == (need <= free)
        if need <= free:
            self.tokens[owner] += more
            self.pool.cache_blocks(owner, self.keys[owner], self.tokens[owner])

    @precondition(lambda self: bool(self.tokens))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.tokens)))
        self.pool.free(owner, self.keys.pop(owner), self.tokens.pop(owner))

    @invariant()
    def consistent(self) -> None:
        self.pool.check_invariants()
        assert self.pool.num_used == self.pool.num_blocks - self.pool.num_free


TestPrefixPool = PrefixPoolMachine.TestCase
