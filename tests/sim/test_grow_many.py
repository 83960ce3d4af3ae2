"""`KVBlockPool.grow_many` (the fast path's bulk growth) against one `allocate` per owner."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from batchsim.sim.kv_cache import KVBlockPool


def _pool_with_history(num_blocks: int, prefix_caching: bool, history: list[tuple[int, int]],
                       released: list[int]) -> KVBlockPool:
    """A pool whose free list and prefix cache went through allocations and releases."""
    pool = KVBlockPool(num_blocks, block_size=4, prefix_caching=prefix_caching)
    for owner, tokens in history:
        pool.allocate(owner, tokens)
    for owner in released:
        if pool.held(owner):
            keys = tuple(1000 * owner + i for i in range(pool.held(owner)))
            pool.free(owner, keys=keys, computed_tokens=4 * pool.held(owner))
    return pool


# A pool's size and the allocations and releases it went through, for `_pool_with_history`.
_POOL_HISTORY = {
    "num_blocks": st.integers(4, 48),
    "prefix_caching": st.booleans(),
    "history": st.lists(st.tuples(st.integers(0, 9), st.integers(1, 60)), max_size=10),
    "released": st.lists(st.integers(0, 9), max_size=5),
}


@settings(max_examples=300, deadline=None)
@given(**_POOL_HISTORY,
       growth=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 80)), min_size=1,
                       max_size=8, unique_by=lambda g: g[0]))
def test_grow_many_is_all_or_nothing_and_equals_one_allocation_per_owner(
        num_blocks, prefix_caching, history, released, growth):
    bulk = _pool_with_history(num_blocks, prefix_caching, history, released)
    one_by_one = _pool_with_history(num_blocks, prefix_caching, history, released)
    owners = [owner for owner, _ in growth]
    tokens = [t for _, t in growth]
    short = sum(max(0, -(-t // 4) - bulk.held(o)) for o, t in growth)
    held_before = [bulk.held(o) for o in owners]
    free_before = bulk.num_free

    grown = bulk.grow_many(owners, tokens)

    assert grown == (short <= free_before)
    if grown:
        for owner, t in growth:
            assert one_by_one.allocate(owner, t)
        assert [bulk.held(o) for o in owners] == [one_by_one.held(o) for o in owners]
        assert bulk.num_free == one_by_one.num_free == free_before - short
        assert bulk.num_cached == one_by_one.num_cached
    else:  # nothing changed
        assert [bulk.held(o) for o in owners] == held_before
        assert bulk.num_free == free_before
    bulk.check_invariants()


def _allocate_as_written_before(pool: KVBlockPool, owner: int, total_tokens: int) -> bool:
    """`allocate` before it was inlined: through `held`, `blocks_for`, `num_free`, `_take`."""
    if owner in pool._owned and total_tokens <= len(pool._owned[owner]) * pool.block_size:
        return True
    need = max(0, pool.blocks_for(total_tokens) - pool.held(owner))
    if need == 0:
        return True
    if need > pool.num_free:
        return False
    pool._owned.setdefault(owner, []).extend(pool._take(need))
    return True


@settings(max_examples=300, deadline=None)
@given(**_POOL_HISTORY,
       requests=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 90)), min_size=1,
                         max_size=10))
def test_allocate_hands_out_the_blocks_it_handed_out_before_it_was_inlined(
        num_blocks, prefix_caching, history, released, requests):
    """The same answers and the same block ids, from the free stack and from evictable
    prefix-cache blocks, for owners new and old, with room and without."""
    pool = _pool_with_history(num_blocks, prefix_caching, history, released)
    reference = _pool_with_history(num_blocks, prefix_caching, history, released)
    for owner, tokens in requests:
        assert pool.allocate(owner, tokens) == _allocate_as_written_before(reference, owner,
                                                                           tokens)
        assert pool._owned == reference._owned
        assert pool._free == reference._free
        assert list(pool._evictable) == list(reference._evictable)
        pool.check_invariants()


@settings(max_examples=300, deadline=None)
@given(**_POOL_HISTORY, data=st.data())
def test_hand_out_gives_the_blocks_grow_many_would(num_blocks, prefix_caching, history,
                                                   released, data):
    """`hand_out` (told what each owner lacks) against `grow_many` (asking the pool): the same
    answer, blocks, free stack and evictable list, from the free stack and from evictable
    prefix-cache blocks, one block each or given counts."""
    pool = _pool_with_history(num_blocks, prefix_caching, history, released)
    reference = _pool_with_history(num_blocks, prefix_caching, history, released)
    holders = sorted(owner for owner in pool._owned if pool.held(owner))
    assume(holders)
    owners = data.draw(st.lists(st.sampled_from(holders), min_size=1, unique=True))
    counts = data.draw(st.none() | st.lists(st.integers(0, 3), min_size=len(owners),
                                             max_size=len(owners)))
    needs = [1] * len(owners) if counts is None else counts
    tokens = [(reference.held(owner) + need) * 4 for owner, need in zip(owners, needs, strict=True)]

    assert pool.hand_out(owners, counts) == reference.grow_many(owners, tokens)
    assert pool._owned == reference._owned
    assert pool._free == reference._free
    assert list(pool._evictable) == list(reference._evictable)
    pool.check_invariants()
