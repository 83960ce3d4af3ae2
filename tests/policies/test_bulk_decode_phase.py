"""A mixed step's decode phase taken in one pass (`ChunkedPrefill._take_decodes_at_once`)
makes exactly the choices of the request-by-request loop it shortcuts: the same requests
finish at the same instants with the same preemptions, over random workloads, caches small
enough to preempt, prefix caching, priority victims and both stepping modes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.test_invariants import LinearCost, workloads


class RequestByRequest(ChunkedPrefill):
    """The policy with the one-pass decode phase turned off."""

    def _take_decodes_at_once(self, chosen, budget) -> bool:  # type: ignore[no-untyped-def]
        return False


class SharedPrefix:
    """Every prompt starts with the same blocks (up to `blocks` of them): the cache has hits."""

    block_tokens = 16

    def __init__(self, prompts: np.ndarray, blocks: int) -> None:
        self.prompts, self.blocks = prompts, blocks

    def blocks_of(self, request: int) -> np.ndarray:
        return np.arange(min(self.blocks, int(self.prompts[request]) // 16), dtype=np.int64)


def _traffic(w: dict, shared_prefix: int) -> OpenLoopTraffic:
    rng = np.random.default_rng(w["seed"])
    n = w["n"]
    prompts = rng.integers(1, w["prompt_max"] + 1, n)
    return OpenLoopTraffic(
        arrival_s=np.cumsum(rng.exponential(1.0 / w["rate"], n)),
        prompt_tokens=prompts,
        output_tokens=rng.integers(1, w["output_max"] + 1, n),
        priority=rng.integers(0, 3, n),
        prefix_blocks=SharedPrefix(prompts, shared_prefix) if shared_prefix else None,
    )


def _outcome(policy_class: type[ChunkedPrefill], w: dict, *, blocks: int, budget: int,
             seqs: int, threshold: int | None, mode: str, victim: str, prefix: int,
             fast: bool) -> list[tuple]:
    pool = KVBlockPool(blocks, 16, prefix_caching=prefix > 0)
    policy = policy_class(pool=pool, token_budget=budget, max_num_seqs=seqs,
                          long_prefill_token_threshold=threshold, preemption=mode,  # type: ignore[arg-type]
                          swap_space=HostSwapSpace(8), victim_rule=victim)  # type: ignore[arg-type]
    record = Simulation([policy], LinearCost(), _traffic(w, prefix), fast_path=fast).run()
    return [(r.request_id, r.status, r.first_token_s, r.finish_s, r.preemptions,
             r.recomputed_tokens, r.cached_tokens, r.reject_reason) for r in record.requests]


@settings(max_examples=80, deadline=None)
@given(w=workloads, blocks=st.integers(4, 200), seqs=st.integers(1, 24),
       budget=st.integers(16, 700), threshold=st.one_of(st.none(), st.integers(1, 300)),
       mode=st.sampled_from(["recompute", "swap"]),
       victim=st.sampled_from(["newest", "priority"]), prefix=st.sampled_from([0, 0, 4]),
       fast=st.booleans())
def test_one_pass_decode_phase_equals_the_request_by_request_loop(
        w, blocks, seqs, budget, threshold, mode, victim, prefix, fast):
    settings_ = dict(blocks=blocks, budget=budget, seqs=seqs, threshold=threshold, mode=mode,
                     victim=victim, prefix=prefix, fast=fast)
    assert (_outcome(ChunkedPrefill, w, **settings_)
            == _outcome(RequestByRequest, w, **settings_))
