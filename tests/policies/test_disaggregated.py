"""Disaggregated serving: handoff rules, layer-wise pipelining and invariants (docs/design.md §2,
§10.2)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.disaggregated import DecodePool, PrefillPool
from batchsim.sim.disaggregated import DECODE_KV_TOO_SMALL, DisaggregatedSimulation, LinkSpec
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.test_invariants import LinearCost, workloads

BLOCK = 16


def _prefill(blocks: int, *, chunked: bool = False, budget: int = 4096,
             seqs: int = 16) -> PrefillPool:
    pool = KVBlockPool(blocks, BLOCK)
    if chunked:
        return PrefillPool(ChunkedPrefill(pool=pool, token_budget=budget, max_num_seqs=seqs))
    return PrefillPool(ContinuousBatching(pool=pool, max_num_seqs=seqs,
                                          max_num_batched_tokens=budget))


def _decode(blocks: int, *, seqs: int = 16, mode: str = "recompute",
            swap_blocks: int = 0) -> DecodePool:
    return DecodePool(ContinuousBatching(
        pool=KVBlockPool(blocks, BLOCK), max_num_seqs=seqs, max_num_batched_tokens=4096,
        preemption=mode, swap_space=HostSwapSpace(swap_blocks)))  # type: ignore[arg-type]


def _link(bandwidth: float = 1e9, latency: float = 0.0, layerwise: bool = False,
          layers: int = 4, per_token: float = 1e3) -> LinkSpec:
    return LinkSpec(bandwidth, latency, layerwise, layers, per_token)


def _traffic(arrivals: list[float], prompts: list[int], outputs: list[int]) -> OpenLoopTraffic:
    return OpenLoopTraffic(np.array(arrivals), np.array(prompts), np.array(outputs))


def _simulate(prefill, decode, link: LinkSpec, traffic: OpenLoopTraffic,
              fast: bool = True) -> DisaggregatedSimulation:
    sim = DisaggregatedSimulation(prefill, decode, prefill_cost=LinearCost(),
                                  decode_cost=LinearCost(), link=link, traffic=traffic,
                                  fast_path=fast)
    sim.run()
    return sim


def test_the_prefill_replica_keeps_the_kv_until_the_transfer_arrives() -> None:
    """A 1-second transfer: halfway through it both pools hold the prompt's blocks."""
    prefill, decode = [_prefill(100)], [_decode(100)]
    sim = DisaggregatedSimulation(prefill, decode, prefill_cost=LinearCost(),
                                  decode_cost=LinearCost(), link=_link(bandwidth=320e3 / 1.0),
                                  traffic=_traffic([0.0], [320], [8]))
    seen: list[tuple[int, int]] = []

    def probe():
        yield sim.env.timeout(0.5)
        seen.append((prefill[0].pool.num_used, decode[0].pool.num_used))

    sim.env.process(probe())
    sim.run()
    assert seen == [(20, 20)]  # 320 tokens = 20 blocks on each side
    handoff = sim.handoffs[0]
    assert handoff.transfer_end_s - handoff.transfer_start_s == pytest.approx(1.0)
    assert prefill[0].pool.num_used == decode[0].pool.num_used == 0


def test_decode_admission_waits_for_free_blocks_and_never_drops() -> None:
    """The decode cache holds one request at a time: the second one's KV is sent only once
    the first has finished and freed its blocks."""
    decode = [_decode(30)]  # 480 tokens; each request needs 300 + 100
    sim = _simulate([_prefill(200)], decode, _link(), _traffic([0.0, 0.0], [300, 300],
                                                               [100, 100]))
    first, second = sim.record.requests
    assert first.status is second.status is RequestStatus.FINISHED
    assert sim.handoffs[1].transfer_start_s >= first.finish_s
    assert decode[0].pool.num_used == 0


def test_a_request_that_never_fits_a_decode_replica_is_rejected_on_arrival() -> None:
    sim = _simulate([_prefill(200)], [_decode(10)], _link(),
                    _traffic([0.0, 0.1], [100, 100], [100, 10]))
    big, small = sim.record.requests
    assert big.status is RequestStatus.REJECTED and big.reject_kind == DECODE_KV_TOO_SMALL
    assert "decode replica" in big.reject_reason
    assert small.status is RequestStatus.FINISHED


def test_a_one_token_answer_needs_no_transfer() -> None:
    sim = _simulate([_prefill(100)], [_decode(100)], _link(), _traffic([0.0], [100], [1]))
    [request] = sim.record.requests
    assert request.status is RequestStatus.FINISHED
    assert request.finish_s == request.first_token_s
    assert sim.links.of(0).bytes_sent == 0


@pytest.mark.parametrize(("bandwidth", "overlapped"), [(1e9, True), (1e6, False)])
def test_layerwise_transfer_overlaps_the_final_prefill_step(bandwidth: float,
                                                            overlapped: bool) -> None:
    """4 layers, 1 request of 1000 tokens (1 MB). Its prefill step takes D; the decode replica
    reserves at the step's start. Fast link: 3/4 of the bytes leave during the step and the
    last quarter after it (+ latency); slow link: the stream just runs T + latency."""
    latency = 1e-3
    sim = _simulate([_prefill(200)], [_decode(200)],
                    _link(bandwidth=bandwidth, latency=latency, layerwise=True),
                    _traffic([0.0], [1000], [4]))
    handoff = sim.handoffs[0]
    request = handoff.request
    step = LinearCost().step_time(np.array([1000]), np.array([0]), 1).seconds
    transfer = 1e6 / bandwidth
    assert handoff.transfer_start_s == 0.0 and request.first_token_s == pytest.approx(step)
    if overlapped:
        assert 0.75 * transfer < step
        expected = step + transfer / 4 + latency
    else:
        expected = transfer + latency
    assert handoff.transfer_end_s == pytest.approx(expected, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(w=workloads, num_prefill=st.integers(1, 3), num_decode=st.integers(1, 3),
       prefill_blocks=st.integers(4, 120), decode_blocks=st.integers(4, 120),
       chunked=st.booleans(), budget=st.integers(16, 700), decode_seqs=st.integers(1, 8),
       mode=st.sampled_from(["recompute", "swap"]), swap_blocks=st.integers(0, 50),
       bandwidth=st.sampled_from([math.inf, 1e5, 1e7]), latency=st.sampled_from([0.0, 2e-3]),
       layerwise=st.booleans(), fast=st.booleans(), per_replica=st.booleans())
def test_every_request_ends_and_every_pool_drains(
        w, num_prefill, num_decode, prefill_blocks, decode_blocks, chunked, budget, decode_seqs,
        mode, swap_blocks, bandwidth, latency, layerwise, fast, per_replica):
    rng = np.random.default_rng(w["seed"])
    n = w["n"]
    traffic = OpenLoopTraffic(np.cumsum(rng.exponential(1.0 / w["rate"], n)),
                              rng.integers(1, w["prompt_max"] + 1, n),
                              rng.integers(1, w["output_max"] + 1, n))
    prefill = [_prefill(prefill_blocks, chunked=chunked, budget=budget)
               for _ in range(num_prefill)]
    decode = [_decode(decode_blocks, seqs=decode_seqs, mode=mode, swap_blocks=swap_blocks)
              for _ in range(num_decode)]
    link = replace(_link(bandwidth, latency, layerwise, layers=8, per_token=10),
                   per_prefill_replica=per_replica)  # one link, or one per prefill replica
    sim = _simulate(prefill, decode, link, traffic, fast)
    record = sim.record
    finished = [r for r in record.requests if r.status is RequestStatus.FINISHED]
    rejected = [r for r in record.requests if r.status is RequestStatus.REJECTED]
    assert len(finished) + len(rejected) == len(record.requests)
    for r in rejected:  # only for a rule that could never let it run, with its reason
        assert r.reject_reason
        assert {
            DECODE_KV_TOO_SMALL: -(-(r.prompt_tokens + r.output_tokens) // BLOCK) > decode_blocks,
            "kv_cache_too_small": -(-(r.prompt_tokens + 1) // BLOCK) > prefill_blocks,
            "prompt_exceeds_token_budget": not chunked and r.prompt_tokens > budget,
        }[r.reject_kind]
    for r in finished:
        assert r.num_generated == r.output_tokens
        assert r.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finish_s
        if r.output_tokens > 1:
            handoff = sim.handoffs[r.request_id]
            assert handoff.transfer_start_s <= handoff.transfer_end_s <= r.finish_s
            assert layerwise or r.first_token_s <= handoff.transfer_start_s
    # Every computed token is a prompt token, an output token fed back, or recomputation,
    # over both pools together; each request has one gap per token after its first.
    expected = sum(r.prompt_tokens + r.output_tokens - 1 + r.recomputed_tokens for r in finished)
    assert record.steps.totals().new_tokens == expected
    assert record.num_itl_gaps() == sum(r.output_tokens - 1 for r in finished)
    for policy in (*prefill, *decode):
        policy.pool.check_invariants()
        assert policy.pool.num_used == 0  # prefill blocks released, decode blocks freed
    assert all(not d.pending and not d.arrived and d.in_flight == 0 for d in decode)
    assert all(link.num_active == 0 for link in sim.links.links)
