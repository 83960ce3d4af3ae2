"""Contiguous KV regions (sim/kv_contiguous.py) and the fragmentation they leave
(sim/kv_fragmentation.py, metrics/kv_fragmentation.py), on hand-computed cases and under
random admit/grow/free sequences."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from batchsim.metrics.kv_fragmentation import kv_fragmentation
from batchsim.sim.kv_cache import KVBlockPool, KVCacheError
from batchsim.sim.kv_contiguous import ContiguousKVPool
from batchsim.sim.kv_fragmentation import FragmentationMeter
from batchsim.sim.recorder import RunRecord
from batchsim.sim.request import Request


def _request(request_id: int, prompt: int, output: int, computed: int = 0) -> Request:
    request = Request(request_id, 0.0, prompt, output)
    request.num_computed_tokens = computed
    return request


def _admit(pool: KVBlockPool, request: Request) -> bool:
    pool.register(request)
    return pool.allocate(request.request_id, request.prompt_tokens)


def _fragmented_pool() -> tuple[ContiguousKVPool, list[Request]]:
    """10 blocks of 4 tokens: a = blocks 0-1, c = blocks 5-7, a hole of 3 between (b left)
    and one of 2 at the end."""
    pool = ContiguousKVPool(10, 4, reserve="max_output", max_model_len=64)
    a, b, c = _request(0, 5, 3, computed=5), _request(1, 9, 3), _request(2, 9, 3, computed=9)
    for request in (a, b, c):
        assert _admit(pool, request)
    pool.free(b.request_id)
    return pool, [a, c]


def test_a_region_is_prompt_plus_output_first_fit() -> None:
    pool, _ = _fragmented_pool()
    assert pool.held(0) == 2 and pool.held(2) == 3  # ceil(8 / 4), ceil(12 / 4)
    assert pool.holes() == [3, 2]
    assert pool.num_used == 5 and pool.num_free == 5
    e = _request(4, 6, 6)  # 3 blocks: the first hole that holds it is the one at block 2
    assert _admit(pool, e)
    assert pool.holes() == [2]
    pool.check_invariants()


def test_a_sequence_is_refused_when_no_hole_holds_it_though_the_free_blocks_would() -> None:
    pool, _ = _fragmented_pool()
    d = _request(3, 10, 6)  # 4 blocks; 5 are free, in holes of 3 and 2
    assert not _admit(pool, d)
    assert pool.held(3) == 0
    assert pool.refused_by_fragmentation() == 1
    assert pool.unusable_free_blocks(d) == 5  # every free block sits in a hole too small
    assert pool.unusable_free_blocks(_request(5, 4, 4)) == 0  # 2 blocks fit either hole
    assert not _admit(pool, _request(6, 30, 30))  # more than all the free blocks: not counted
    assert pool.refused_by_fragmentation() == 1


def test_a_running_sequence_grows_inside_its_region_and_never_beyond() -> None:
    pool, _ = _fragmented_pool()
    assert pool.allocate(0, 8)  # a's whole life
    assert not pool.allocate(0, 9)
    assert pool.grow_many([0, 2], [7, 12])
    with pytest.raises(KVCacheError):
        pool.hand_out([0])


def test_the_metric_on_a_hand_computed_case() -> None:
    """a writes 5 of its 8 reserved tokens, c 9 of 12: 3 + 3 = 6 tokens of internal
    fragmentation in a 40-token cache (0.15); d, waiting for 4 blocks, finds all 5 free ones
    (20 tokens, 0.5) in holes too small. A 2 s step so, then a 1 s step with a hole-fitting
    head (no external): means 0.15 and (0.5·2 + 0)/3."""
    pool, holders = _fragmented_pool()
    d = _request(3, 10, 6)
    _admit(pool, d)
    heads = [d, None]
    record = RunRecord(kv_blocks_per_replica=10)
    meter = FragmentationMeter(pool, lambda: holders, lambda: heads[0])
    record.kv_fragmentation.append(meter)
    meter.sample(2.0)
    heads[0] = None
    meter.sample(1.0)
    metrics = kv_fragmentation(record)
    assert metrics is not None
    assert metrics["internal_share_mean"] == pytest.approx(0.15)
    assert metrics["internal_share_peak"] == pytest.approx(0.15)
    assert metrics["internal_tokens_mean"] == pytest.approx(6.0)
    assert metrics["external_share_mean"] == pytest.approx(1.0 / 3.0)
    assert metrics["external_share_peak"] == pytest.approx(0.5)
    assert metrics["requests_refused_by_fragmentation"] == 1
    assert metrics["mean_sequences"] == pytest.approx(2.0)
    assert metrics["max_sequences"] == 2
    assert metrics["allocation"] == "contiguous"


def test_a_paged_pool_wastes_only_each_last_block_tail_and_has_no_holes() -> None:
    pool = KVBlockPool(10, 4)
    holders = [_request(0, 5, 3, computed=5), _request(1, 9, 3, computed=9)]
    for request in holders:
        assert pool.allocate(request.request_id, request.num_computed_tokens)
    meter = FragmentationMeter(pool, lambda: holders, lambda: _request(2, 30, 4))
    meter.sample(1.0)
    assert meter.internal_token_s == 3 + 3  # 2 blocks for 5 tokens, 3 blocks for 9
    assert meter.external_token_s == 0


def test_a_stretch_samples_what_stepping_one_by_one_would() -> None:
    """Two decodes from 5 and 9 computed tokens, paged, blocks of 4: stepping, the pool
    takes a block when a context crosses a multiple of 4; the stretch's arithmetic agrees."""
    stepped_pool, stretched_pool = KVBlockPool(20, 4), KVBlockPool(20, 4)
    stepped = [_request(0, 5, 9, computed=5), _request(1, 9, 9, computed=9)]
    stretched = [_request(0, 5, 9, computed=5), _request(1, 9, 9, computed=9)]
    for pool, requests in ((stepped_pool, stepped), (stretched_pool, stretched)):
        for request in requests:
            pool.allocate(request.request_id, request.num_computed_tokens + 1)
    one_by_one = FragmentationMeter(stepped_pool, lambda: stepped, lambda: None)
    kv_used = []
    for step in range(4):
        kv_used.append(stepped_pool.num_used)
        for request in stepped:
            request.num_computed_tokens += 1
        one_by_one.sample(0.5 + step)
        for request in stepped:
            stepped_pool.allocate(request.request_id, request.num_computed_tokens + 1)
    bulk = FragmentationMeter(stretched_pool, lambda: stretched, lambda: None)
    bulk.sample_stretch(2, kv_used, [0.5, 1.5, 2.5, 3.5], bulk.external_now())
    assert bulk.internal_token_s == one_by_one.internal_token_s
    assert bulk.internal_peak == one_by_one.internal_peak
    assert bulk.busy_s == one_by_one.busy_s


@settings(max_examples=25, stateful_step_count=25, deadline=None)
class ContiguousPoolMachine(RuleBasedStateMachine):
    """Regions never overlap, used tokens never exceed a region, reserved + free blocks are
    the pool, and a refusal means no hole held the region."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = ContiguousKVPool(24, 4, reserve="max_output", max_model_len=96)
        self.lifetime: dict[int, int] = {}  # owner -> tokens its region must hold
        self.used: dict[int, int] = {}  # owner -> tokens it has asked room for
        self.next_id = 0

    @rule(prompt=st.integers(1, 40), output=st.integers(1, 40))
    def admit(self, prompt: int, output: int) -> None:
        request = _request(self.next_id, prompt, output)
        self.next_id += 1
        holes = self.pool.holes()
        need = -(-(prompt + output) // 4)
        if _admit(self.pool, request):
            assert self.pool.held(request.request_id) == need
            self.lifetime[request.request_id] = prompt + output
            self.used[request.request_id] = prompt
        else:
            assert all(hole < need for hole in holes)

    @precondition(lambda self: bool(self.used))
    @rule(data=st.data())
    def grow(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.used)))
        tokens = data.draw(st.integers(self.used[owner], self.lifetime[owner]))
        assert self.pool.allocate(owner, tokens)
        self.used[owner] = tokens

    @precondition(lambda self: bool(self.used))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(sorted(self.used)))
        held = self.pool.held(owner)
        assert self.pool.free(owner) == held
        del self.used[owner]

    @invariant()
    def regions_are_disjoint_and_account_for_the_pool(self) -> None:
        self.pool.check_invariants()
        assert self.pool.num_used + sum(self.pool.holes()) == self.pool.num_blocks
        for owner, tokens in self.used.items():
            assert tokens <= self.pool.held(owner) * self.pool.block_size


TestContiguousPool = ContiguousPoolMachine.TestCase
