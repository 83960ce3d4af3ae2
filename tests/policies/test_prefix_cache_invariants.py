"""Prefix caching under random workloads: the pool's invariants hold around every step
(reference counts, evictable and owned blocks), every request ends, nothing leaks, and the
tokens computed are those without caching less the cached ones."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from batchsim.workloads.prefix_blocks import PrefixBlocks
from tests.policies.checked_policy import CheckedPolicy
from tests.policies.test_invariants import LinearCost

workloads = st.fixed_dictionaries({
    "n": st.integers(1, 50),
    "rate": st.floats(0.5, 200.0),
    "chains": st.integers(1, 4),
    "prompt_max": st.integers(1, 500),
    "output_max": st.integers(1, 200),
    "seed": st.integers(0, 2**16),
})


def _traffic(w: dict) -> OpenLoopTraffic:
    """Prompts that start with one of a few shared chains of 32-token blocks."""
    rng = np.random.default_rng(w["seed"])
    n = w["n"]
    prompts = rng.integers(1, w["prompt_max"] + 1, n)
    chains = rng.integers(0, w["chains"], n)
    shared = rng.integers(0, 8, n)  # how many leading blocks follow the chain
    ids = [[int(c) * 1000 + b if b < s else (i + 1) * 100_000 + b
            for b in range(-(-int(p) // 32))]
           for i, (p, c, s) in enumerate(zip(prompts, chains, shared, strict=True))]
    return OpenLoopTraffic(
        arrival_s=np.cumsum(rng.exponential(1.0 / w["rate"], n)), prompt_tokens=prompts,
        output_tokens=rng.integers(1, w["output_max"] + 1, n),
        prefix_blocks=PrefixBlocks.from_lists(ids, block_tokens=32))


def _check(record, checked: CheckedPolicy) -> None:
    requests = record.requests
    assert all(r.status in (RequestStatus.FINISHED, RequestStatus.REJECTED) for r in requests)
    finished = [r for r in requests if r.status is RequestStatus.FINISHED]
    for r in finished:
        assert r.num_generated == r.output_tokens
        assert 0 <= r.cached_tokens < r.prompt_tokens and r.cached_tokens % 16 == 0
    computed = record.steps.totals().new_tokens
    expected = sum(r.prompt_tokens + r.output_tokens - 1 + r.recomputed_tokens
                   - r.cached_tokens for r in finished)
    if any(r.preemptions for r in requests):
        # A readmission may find cached more than it had computed (blocks another request
        # cached), which `cached_tokens` (first admission) does not count:
        # tests/policies/test_recomputed_tokens.py pins the exact accounting.
        assert computed <= expected
    else:
        assert computed == expected
    assert checked.pool.num_used == 0
    checked.pool.check_invariants()


@settings(max_examples=50, deadline=None)
@given(w=workloads, blocks=st.integers(8, 200), seqs=st.integers(1, 16),
       mode=st.sampled_from(["recompute", "swap"]), fast=st.booleans())
def test_continuous_with_prefix_caching_keeps_the_invariants(w, blocks, seqs, mode, fast):
    pool = KVBlockPool(blocks, 16, prefix_caching=True)
    inner = ContinuousBatching(pool=pool, max_num_seqs=seqs, max_num_batched_tokens=1000,
                               preemption=mode, swap_space=HostSwapSpace(20))
    checked = CheckedPolicy(inner, max_seqs=seqs, max_tokens=1000)
    _check(Simulation([checked], LinearCost(), _traffic(w), fast_path=fast).run(), checked)


@settings(max_examples=50, deadline=None)
@given(w=workloads, blocks=st.integers(8, 200), seqs=st.integers(1, 16),
       budget=st.integers(16, 600), mode=st.sampled_from(["recompute", "swap"]),
       fast=st.booleans())
def test_chunked_prefill_with_prefix_caching_keeps_the_invariants(w, blocks, seqs, budget, mode,
                                                                  fast):
    pool = KVBlockPool(blocks, 16, prefix_caching=True)
    inner = ChunkedPrefill(pool=pool, token_budget=budget, max_num_seqs=seqs, preemption=mode,
                           swap_space=HostSwapSpace(20))
    checked = CheckedPolicy(inner, max_seqs=seqs, max_tokens=budget)
    _check(Simulation([checked], LinearCost(), _traffic(w), fast_path=fast).run(), checked)
