"""Conservation and invariants over random workloads (docs/design.md §10.2), for every policy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.static import StaticBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import RequestStatus
from batchsim.sim.traffic import ClosedLoopTraffic, OpenLoopTraffic
from tests.policies.checked_policy import CheckedPolicy


@dataclass(frozen=True)
class _Seconds:
    seconds: float


class LinearCost:
    """A simple, strictly positive step cost: the invariants must not depend on the physics."""

    def step_time(self, new: np.ndarray, context: np.ndarray, emitting: int) -> _Seconds:
        return _Seconds(2e-3 + 2e-5 * float(new.sum()) + 1e-8 * float(context.sum()))

    def step_seconds(self, new: list[int], context: list[int], emitting: int) -> float:
        return self.step_time(np.array(new), np.array(context), emitting).seconds

    def swap_time(self, num_tokens: int) -> float:
        return 1e-6 * num_tokens

    def decode_step_seconds(self, new: np.ndarray, context: np.ndarray, emitting: int,
                            num_steps: int) -> np.ndarray:
        return np.array([self.step_time(new, context + j, emitting).seconds
                         for j in range(num_steps)])

    def decode_step_list(self, new: list[int], context: list[int], emitting: int,
                         num_steps: int, within_s: float = float("inf")) -> list[float]:
        # Every step, whatever `within_s` (pricing may stop early; it need not).
        return self.decode_step_seconds(np.array(new), np.array(context), emitting,
                                        num_steps).tolist()


workloads = st.fixed_dictionaries({
    "n": st.integers(1, 60),
    "rate": st.floats(0.5, 200.0),
    "prompt_max": st.integers(1, 600),
    "output_max": st.integers(1, 300),
    "seed": st.integers(0, 2**16),
})


def _traffic(w: dict) -> OpenLoopTraffic:
    rng = np.random.default_rng(w["seed"])
    n = w["n"]
    return OpenLoopTraffic(
        arrival_s=np.cumsum(rng.exponential(1.0 / w["rate"], n)),
        prompt_tokens=rng.integers(1, w["prompt_max"] + 1, n),
        output_tokens=rng.integers(1, w["output_max"] + 1, n),
    )


def _check_conservation(record, checked: CheckedPolicy) -> None:
    finished = [r for r in record.requests if r.status is RequestStatus.FINISHED]
    rejected = [r for r in record.requests if r.status is RequestStatus.REJECTED]
    assert len(finished) + len(rejected) == len(record.requests)  # every request ends once
    assert all(r.reject_reason for r in rejected)
    for r in finished:
        assert r.num_generated == r.output_tokens
        assert r.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finish_s
    # Every computed token is a prompt token, an output token fed back, or recomputation.
    expected = sum(r.prompt_tokens + r.output_tokens - 1 + r.recomputed_tokens for r in finished)
    assert record.steps.totals().new_tokens == expected
    assert record.num_itl_gaps() == sum(r.output_tokens - 1 for r in finished)
    assert checked.pool.num_used == 0  # nothing leaked at the end


# Without chunked prefill the budget must hold a whole request (prompt + output, at most 900
# tokens here), as the policy factory requires: a request recomputed after preemption is
# prefilled again with the tokens it had generated, and a smaller budget could never take it.
@settings(max_examples=60, deadline=None)
@given(w=workloads, blocks=st.integers(4, 200), seqs=st.integers(1, 16),
       budget=st.integers(900, 2000), mode=st.sampled_from(["recompute", "swap"]),
       swap_blocks=st.integers(0, 50), fast=st.booleans())
def test_continuous_conserves_tokens_and_blocks(w, blocks, seqs, budget, mode, swap_blocks,
                                                fast):
    pool = KVBlockPool(blocks, 16)
    inner = ContinuousBatching(pool=pool, max_num_seqs=seqs, max_num_batched_tokens=budget,
                               preemption=mode, swap_space=HostSwapSpace(swap_blocks))
    checked = CheckedPolicy(inner, max_seqs=seqs, max_tokens=budget)
    record = Simulation([checked], LinearCost(), _traffic(w), fast_path=fast).run()
    _check_conservation(record, checked)
    for r in record.requests:
        if r.status is RequestStatus.REJECTED:
            assert pool.blocks_for(r.prompt_tokens + r.output_tokens) > blocks


@settings(max_examples=60, deadline=None)
@given(w=workloads, blocks=st.integers(4, 200), seqs=st.integers(1, 16),
       budget=st.integers(16, 700), threshold=st.one_of(st.none(), st.integers(1, 300)),
       mode=st.sampled_from(["recompute", "swap"]), swap_blocks=st.integers(0, 50),
       fast=st.booleans())
def test_chunked_prefill_conserves_tokens_and_blocks(w, blocks, seqs, budget, threshold, mode,
                                                     swap_blocks, fast):
    """Budgets below the prompts force chunking; small caches force preemption mid-prefill."""
    pool = KVBlockPool(blocks, 16)
    inner = ChunkedPrefill(pool=pool, token_budget=budget, max_num_seqs=seqs,
                           long_prefill_token_threshold=threshold, preemption=mode,
                           swap_space=HostSwapSpace(swap_blocks))
    checked = CheckedPolicy(inner, max_seqs=seqs, max_tokens=budget)
    record = Simulation([checked], LinearCost(), _traffic(w), fast_path=fast).run()
    _check_conservation(record, checked)
    for r in record.requests:
        if r.status is RequestStatus.REJECTED:  # only a request the whole cache cannot hold
            assert pool.blocks_for(r.prompt_tokens + r.output_tokens) > blocks


@settings(max_examples=40, deadline=None)
@given(w=workloads, blocks=st.integers(40, 300), batch=st.integers(1, 16),
       wait=st.sampled_from([0.0, 0.05, 1.0]), fast=st.booleans())
def test_static_conserves_tokens_and_blocks(w, blocks, batch, wait, fast):
    pool = KVBlockPool(blocks, 16)
    inner = StaticBatching(pool=pool, max_batch_size=batch, max_wait_s=wait,
                           max_output_tokens=200)
    checked = CheckedPolicy(inner, max_seqs=batch, max_tokens=None)
    record = Simulation([checked], LinearCost(), _traffic(w), fast_path=fast).run()
    _check_conservation(record, checked)
    for r in record.requests:
        if r.status is RequestStatus.REJECTED:
            assert r.output_tokens > 200 or pool.blocks_for(r.prompt_tokens + 200) > blocks


def run_small_cache_closed_loop(inner, *, max_tokens: int):
    """8 closed-loop users of 100 + 200 tokens each on `inner`, whose pool should be small
    (30 blocks = 480 tokens forces preemption); conservation is checked on the way out."""
    checked = CheckedPolicy(inner, max_seqs=8, max_tokens=max_tokens)

    def lengths():
        while True:
            yield 100, 200

    traffic = ClosedLoopTraffic(concurrency=8, think_time_s=0.0, lengths=lengths,
                                num_requests=40, duration_s=None)
    record = Simulation([checked], LinearCost(), traffic).run()
    _check_conservation(record, checked)
    return record, checked


def test_small_cache_forces_preemption_and_recomputation_is_counted():
    pool = KVBlockPool(30, 16)  # 480 tokens for 8 users of 100 + 200 tokens each
    inner = ContinuousBatching(pool=pool, max_num_seqs=8, max_num_batched_tokens=4096)
    record, checked = run_small_cache_closed_loop(inner, max_tokens=4096)
    assert checked.preempting_steps > 0
    assert sum(r.recomputed_tokens for r in record.requests) > 0
    assert len(record.requests) == 40
