"""Chunked prefill on a KV cache too small for its prompts (issue #18 item 15).

Admission checks only a prompt's first chunk, so a near-`max_model_len` prompt that enters
beside long decodes cannot grow at its next chunk and preempts itself. vLLM v1 (0.12.0) does
the same; with prefix caching on (its default) the blocks it computed stay cached under its
own keys, so it comes back only when those and its next chunk fit, and recomputes nothing.
Without prefix caching (vLLM's `--no-enable-prefix-caching`) it is readmitted with one chunk
at the next step and preempts itself again: the thrash is vLLM's too, and stays.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.preemption import own_block_keys
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.checked_policy import CheckedPolicy
from tests.policies.test_invariants import LinearCost

BLOCKS = 600  # 9,600 tokens: two prompts of ~3,400 tokens and their outputs, not a third
BUDGET = 2048
CHUNK = BUDGET - 2  # a prompt's chunk beside two decodes


def _chunked(prefix_caching: bool) -> CheckedPolicy:
    pool = KVBlockPool(BLOCKS, 16, prefix_caching=prefix_caching)
    inner = ChunkedPrefill(pool=pool, token_budget=BUDGET, max_num_seqs=16,
                           swap_space=HostSwapSpace(0))
    return CheckedPolicy(inner, max_seqs=16, max_tokens=BUDGET)


def _step_to_the_end(policy: CheckedPolicy, arrivals: dict[int, list[Request]]) -> None:
    """Step the policy alone (no engine); `arrivals[k]` join before step k."""
    step = 0
    while policy.has_work() or any(k >= step for k in arrivals):
        for request in arrivals.get(step, []):
            assert policy.add_request(request, float(step))
        plan = policy.schedule(float(step))
        if not plan.is_empty:
            policy.on_step_done(plan, float(step))
            policy.pool.check_invariants()
        step += 1


def _third_prompt_beside_two_decodes(prefix_caching: bool) -> Request:
    """Two 3,400-token prompts decode 300 tokens each; a third arrives once they decode. Its
    first chunk (128 blocks) fits beside them, its whole prompt (213) never does."""
    decodes = [Request(i, 0.0, 3400, 300) for i in range(2)]
    late = Request(2, 10.0, 3400, 10)
    policy = _chunked(prefix_caching)
    _step_to_the_end(policy, {0: decodes, 10: [late]})
    assert all(r.status is RequestStatus.FINISHED for r in [*decodes, late])
    assert policy.pool.num_used == 0
    return late


def test_with_prefix_caching_a_prompt_that_preempted_itself_waits_and_recomputes_nothing():
    late = _third_prompt_beside_two_decodes(prefix_caching=True)
    # Once: its first chunk fit, its second did not. Readmission needs the 127 full blocks it
    # finds again plus its next chunk, which fit only once a decode has finished; only the
    # partly filled block of its chunk (the budget the two decodes left) is computed again.
    assert late.preemptions == 1
    assert late.recomputed_tokens == CHUNK % 16


def test_without_prefix_caching_it_is_readmitted_every_other_step_as_vllm_does():
    late = _third_prompt_beside_two_decodes(prefix_caching=False)
    # Admitted with one chunk, preempted by its next, for as long as the decodes run.
    assert late.preemptions > 100
    assert late.recomputed_tokens == late.preemptions * CHUNK


def test_own_keys_follow_the_workloads_and_never_match_another_requests():
    shared = Request(7, 0.0, 40, 5)
    shared.prefix_keys = (11, 12)  # two full prompt blocks named by the workload
    shared.num_generated = 30  # 70 known tokens: four full blocks
    keys = own_block_keys(shared, 16)
    assert keys[:2] == (11, 12) and len(keys) == 4
    other = Request(8, 0.0, 40, 5)
    other.num_generated = 30
    assert not set(own_block_keys(other, 16)) & set(keys)
    # A 64-bit workload id shifted by 32 bits stays below every own key.
    assert min(keys[2:]) > ((2**63 - 1) << 32 | 2**32 - 1)


def _near_max_len_traffic(seed: int = 1, n: int = 120) -> OpenLoopTraffic:
    """Prompts of 3,000-3,800 tokens (near a 4,096-token max_model_len) at 4 per second."""
    rng = np.random.default_rng(seed)
    return OpenLoopTraffic(arrival_s=np.cumsum(rng.exponential(0.25, n)),
                           prompt_tokens=rng.integers(3000, 3801, n),
                           output_tokens=rng.integers(64, 257, n))


def _simulate(inner, *, fast_path: bool = True, seed: int = 1) -> list[Request]:
    checked = CheckedPolicy(inner, max_seqs=inner.max_num_seqs, max_tokens=None)
    record = Simulation([checked], LinearCost(), _near_max_len_traffic(seed),
                        fast_path=fast_path).run()
    assert all(r.status is RequestStatus.FINISHED for r in record.requests)
    checked.pool.check_invariants()
    return record.requests


def _pool(prefix_caching: bool) -> KVBlockPool:
    return KVBlockPool(BLOCKS, 16, prefix_caching=prefix_caching)


def _chunked_policy(prefix_caching: bool) -> ChunkedPrefill:
    return ChunkedPrefill(pool=_pool(prefix_caching), token_budget=BUDGET, max_num_seqs=256,
                          swap_space=HostSwapSpace(0))


def _thrash(requests: list[Request]) -> tuple[float, float]:
    """Median preemptions per request, and recomputed tokens as a share of all computed."""
    recomputed = sum(r.recomputed_tokens for r in requests)
    computed = recomputed + sum(r.prompt_tokens + r.output_tokens - r.cached_tokens
                                for r in requests)
    return float(np.median([r.preemptions for r in requests])), recomputed / computed


def test_on_the_reproduction_prefix_caching_stops_the_thrash_as_in_vllm():
    thrashing = _thrash(_simulate(_chunked_policy(prefix_caching=False)))
    cached = _thrash(_simulate(_chunked_policy(prefix_caching=True)))
    whole = _thrash(_simulate(ContinuousBatching(pool=_pool(False), max_num_seqs=256,
                                                 max_num_batched_tokens=4096)))
    assert thrashing[0] > 10 and thrashing[1] > 0.8  # vLLM without prefix caching
    assert cached[0] <= 1 and cached[1] < 0.1  # one self-preemption, little recomputed
    assert whole[0] == 0 and whole[1] < 0.1  # whole prompts wait until they fit


# One seed in the default run; the others with `-m slow` (the hypothesis equivalence tests
# cover prefix caching in general).
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow),
                                  pytest.param(3, marks=pytest.mark.slow)])
def test_own_cached_blocks_keep_the_fast_path_exact(seed: int):
    """Recomputed requests' own cached blocks, evicted by decode growth mid-stretch, leave
    every request's timeline as stepping one by one gives it."""
    runs = [[(r.first_token_s, r.finish_s, r.preemptions, r.recomputed_tokens)
             for r in _simulate(_chunked_policy(True), fast_path=fast, seed=seed)]
            for fast in (True, False)]
    assert runs[0] == runs[1]
