"""`recomputed_tokens` counts tokens computed again: a readmitted request's prefix that it finds
still cached after a recompute preemption is not computed again, so it is not counted."""

from __future__ import annotations

import numpy as np

from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.preemption import preempt
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool, pool_block_keys
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan


def _prefilled_then_preempted(prefix_caching: bool,
                              prompt: int = 60) -> tuple[ContinuousBatching, Request]:
    pool = KVBlockPool(32, 16, prefix_caching=prefix_caching)
    policy = ContinuousBatching(pool=pool, max_num_seqs=4, max_num_batched_tokens=1000,
                                preemption="recompute", swap_space=HostSwapSpace(0))
    request = Request(0, 0.0, prompt, 8)
    request.prefix_keys = pool_block_keys(np.arange(4, dtype=np.int64), 16, 16, prompt)
    assert policy.add_request(request, 0.0)
    plan = policy.schedule(0.0)
    policy.on_step_done(plan, 0.1)
    assert request.num_computed_tokens == prompt  # whose full blocks are now cached
    preempt(request, pool, "recompute", None, StepPlan())
    policy.running.remove(request)
    policy.waiting.push_front(request)
    return policy, request


def test_a_readmission_that_finds_its_prefix_cached_recomputes_only_the_rest() -> None:
    policy, request = _prefilled_then_preempted(prefix_caching=True)
    assert request.recomputed_tokens == 60  # all dropped, as far as the preemption knows
    plan = policy.schedule(0.2)
    # Three full blocks (48 of the 60 dropped tokens) are found again; the 12 others are
    # computed again, with the first output token, whose KV was never computed.
    assert plan.requests == [request] and plan.num_new_tokens == [13]
    assert request.recomputed_tokens == 60 - 48


def test_a_readmission_finds_every_full_block_it_knows_but_the_last_token() -> None:
    """vLLM v1 caps a hit at the request's known tokens less one (prompt and output), not at
    its prompt: a 64-token prompt with one output finds all four blocks and computes one."""
    policy, request = _prefilled_then_preempted(prefix_caching=True, prompt=64)
    plan = policy.schedule(0.2)
    assert plan.num_new_tokens == [1]
    assert request.recomputed_tokens == 0


def test_without_prefix_caching_every_dropped_token_is_recomputed() -> None:
    policy, request = _prefilled_then_preempted(prefix_caching=False)
    plan = policy.schedule(0.2)
    assert plan.num_new_tokens == [61]
    assert request.recomputed_tokens == 60
