"""Orderings over random multi-tenant workloads: the policy invariants still hold, keyed
orderings admit in key order, aging bounds every wait, fair share keeps backlogged tenants'
service within a stated tolerance."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.metrics.fairness import isolated_service_s
from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.fair_share import FairShareQueue
from batchsim.policies.ordering import (
    FcfsQueue,
    KeyedQueue,
    WaitingQueue,
    priority_key,
    shortest_prompt_key,
)
from batchsim.policies.static import StaticBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepOutcome, StepPlan
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.checked_policy import CheckedPolicy
from tests.policies.test_invariants import LinearCost, _check_conservation, workloads

PRIORITY_AGING_S = 0.05
SPF_AGING_TOKENS_PER_S = 4000.0
PRIORITY_OF_TENANT = (0, 2, 1)

ORDERINGS: dict[str, Callable[[], WaitingQueue]] = {
    "fcfs": FcfsQueue,
    "priority": lambda: KeyedQueue(priority_key(None)),
    "priority_aging": lambda: KeyedQueue(priority_key(PRIORITY_AGING_S)),
    "spf": lambda: KeyedQueue(shortest_prompt_key(None)),
    "spf_aging": lambda: KeyedQueue(shortest_prompt_key(SPF_AGING_TOKENS_PER_S)),
    "fair_share": FairShareQueue,
}
KEYS: dict[str, Callable[[Request], float]] = {
    "priority": priority_key(None), "priority_aging": priority_key(PRIORITY_AGING_S),
    "spf": shortest_prompt_key(None), "spf_aging": shortest_prompt_key(SPF_AGING_TOKENS_PER_S),
}


def _tenant_traffic(w: dict) -> OpenLoopTraffic:
    rng = np.random.default_rng(w["seed"])
    n = w["n"]
    tenant = rng.integers(0, 3, n)
    return OpenLoopTraffic(
        arrival_s=np.cumsum(rng.exponential(1.0 / w["rate"], n)),
        prompt_tokens=rng.integers(1, w["prompt_max"] + 1, n),
        output_tokens=rng.integers(1, w["output_max"] + 1, n),
        tenant=tenant, priority=np.array(PRIORITY_OF_TENANT)[tenant],
    )


def _policy(kind: str, ordering: WaitingQueue, *, blocks: int, seqs: int, mode: str):
    pool = KVBlockPool(blocks, 16)
    if kind == "static":
        return StaticBatching(pool=pool, max_batch_size=seqs, max_wait_s=0.01,
                              max_output_tokens=300, ordering=ordering), None
    if kind == "chunked_prefill":
        return ChunkedPrefill(pool=pool, token_budget=256, max_num_seqs=seqs, preemption=mode,
                              swap_space=HostSwapSpace(20), ordering=ordering), 256
    return ContinuousBatching(pool=pool, max_num_seqs=seqs, max_num_batched_tokens=2000,
                              preemption=mode, swap_space=HostSwapSpace(20),
                              ordering=ordering), 2000


def _assert_first_admissions_follow_the_key(requests: list[Request],
                                            key: Callable[[Request], float]) -> None:
    """No request was first admitted ahead of one that was already waiting with a better
    (key, arrival order) — preempted requests coming back first are not first admissions."""
    started = [r for r in requests if np.isfinite(r.first_scheduled_s)]
    for s in started:
        for r in started:
            if s.first_scheduled_s < r.first_scheduled_s and r.arrival_s < s.first_scheduled_s:
                assert (key(s), s.request_id) < (key(r), r.request_id), (s, r)


@settings(max_examples=80, deadline=None)
@given(w=workloads, kind=st.sampled_from(["continuous", "chunked_prefill", "static"]),
       ordering=st.sampled_from(sorted(ORDERINGS)), blocks=st.integers(40, 200),
       seqs=st.integers(1, 16), mode=st.sampled_from(["recompute", "swap"]),
       fast=st.booleans())
def test_orderings_keep_the_policy_invariants(w, kind, ordering, blocks, seqs, mode, fast):
    """Budgets, KV accounting and token conservation (CheckedPolicy) hold under every
    ordering; keyed orderings admit in key order."""
    inner, max_tokens = _policy(kind, ORDERINGS[ordering](), blocks=blocks, seqs=seqs,
                                mode=mode)
    checked = CheckedPolicy(inner, max_seqs=seqs, max_tokens=max_tokens)
    record = Simulation([checked], LinearCost(), _tenant_traffic(w), fast_path=fast).run()
    _check_conservation(record, checked)
    if ordering in KEYS:
        _assert_first_admissions_follow_the_key(record.requests, KEYS[ordering])


# --- aging: no starvation --------------------------------------------------------------------


def _one_at_a_time(ordering: WaitingQueue, traffic: OpenLoopTraffic) -> list[Request]:
    """A replica that serves one request at a time, with room for any request."""
    policy = ContinuousBatching(pool=KVBlockPool(10_000, 16), max_num_seqs=1,
                                max_num_batched_tokens=4096, ordering=ordering)
    return Simulation([policy], LinearCost(), traffic).run().requests


@settings(max_examples=40, deadline=None)
@given(w=workloads, ordering=st.sampled_from(["priority_aging", "spf_aging"]))
def test_with_aging_every_wait_is_bounded(w, ordering):
    """A request r can be overtaken only by requests arriving before a_r + Δ_r, where
    Δ_r = (base_r − smallest base) / aging rate; one at a time, the replica is busy with
    those while r waits, so r waits at most their total service time alone — however many
    better-ranked requests arrive later."""
    traffic = _tenant_traffic(w)
    requests = _one_at_a_time(ORDERINGS[ordering](), traffic)
    service = isolated_service_s(traffic.prompt_tokens, traffic.output_tokens, LinearCost())
    if ordering == "spf_aging":
        base, rate = traffic.prompt_tokens.astype(float), SPF_AGING_TOKENS_PER_S
    else:
        base, rate = np.asarray(traffic.priority, dtype=float), 1.0 / PRIORITY_AGING_S
    for r in requests:
        horizon = r.arrival_s + (base[r.request_id] - base.min()) / rate
        ahead = (traffic.arrival_s <= horizon) & (np.arange(traffic.arrival_s.size)
                                                  != r.request_id)
        wait = r.first_scheduled_s - r.arrival_s
        assert wait <= service[ahead].sum() + 1e-9, (r.request_id, wait)


def _long_behind_a_stream_of_short(num_short: int) -> OpenLoopTraffic:
    """A long prompt arrives while a short request runs; short ones keep arriving faster
    than they are served."""
    arrivals = [0.0, 0.001, *(0.002 + 0.015 * np.arange(num_short))]
    prompts = [10, 500, *([10] * num_short)]
    return OpenLoopTraffic(np.array(arrivals), np.array(prompts),
                           np.full(len(prompts), 10))


def _long_wait(ordering: WaitingQueue, num_short: int) -> float:
    long = _one_at_a_time(ordering, _long_behind_a_stream_of_short(num_short))[1]
    return long.first_scheduled_s - long.arrival_s


def test_shortest_first_starves_a_long_prompt_and_aging_bounds_its_wait():
    unaged = [_long_wait(KeyedQueue(shortest_prompt_key(None)), n) for n in (100, 200)]
    aged = [_long_wait(KeyedQueue(shortest_prompt_key(49_000.0)), n) for n in (100, 200)]
    assert unaged[1] > 1.9 * unaged[0]  # waits as long as the short stream lasts
    assert aged[0] == aged[1] < 0.1  # 490 tokens longer = 10 ms of aging


# --- fair share: equal service for backlogged tenants ----------------------------------------


class _ServiceWatch(CheckedPolicy):
    """Checks, after every step during which both tenants wait, how far apart their service
    is: the fair-share counters, or (any ordering) weighted tokens counted step by step."""

    def __init__(self, inner, *, max_seqs: int, max_tokens: int | None) -> None:
        super().__init__(inner, max_seqs=max_seqs, max_tokens=max_tokens)
        self.tokens = [0.0, 0.0]
        self.widest_gap = 0.0

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        for request, n in zip(plan.requests, plan.num_new_tokens, strict=True):
            emitted = int(request.num_computed_tokens + n == request.num_tokens)
            self.tokens[request.tenant] += (n - emitted) + 2 * emitted
        outcome = super().on_step_done(plan, now)
        waiting = self.inner.waiting
        if {r.tenant for r in waiting} == {0, 1}:
            if isinstance(waiting, FairShareQueue):
                gap = abs(waiting.counter(0) - waiting.counter(1))
            else:
                gap = abs(self.tokens[0] - self.tokens[1])
            self.widest_gap = max(self.widest_gap, gap)
        return outcome


def _two_bursts(rng: np.random.Generator, sizes: tuple[int, int], late: float) -> OpenLoopTraffic:
    """Tenant 0: big requests from t = 0; tenant 1: small ones from t = `late`."""
    n0, n1 = sizes
    arrivals = np.concatenate([np.sort(rng.uniform(0, 0.01, n0)),
                               late + np.sort(rng.uniform(0, 0.01, n1))])
    order = np.argsort(arrivals, kind="stable")
    tenant = np.repeat([0, 1], [n0, n1])
    prompt = np.concatenate([rng.integers(200, 401, n0), rng.integers(20, 61, n1)])
    output = np.concatenate([rng.integers(20, 61, n0), rng.integers(5, 21, n1)])
    return OpenLoopTraffic(arrivals[order], prompt[order], output[order], tenant[order],
                           np.zeros(n0 + n1, dtype=np.int64))


def _largest_request_service(traffic: OpenLoopTraffic) -> float:
    """Weighted tokens (1 per input, 2 per output) of the largest request."""
    return float((traffic.prompt_tokens + 2 * traffic.output_tokens).max())


def _watch(kind: str, ordering: WaitingQueue, traffic: OpenLoopTraffic, seqs: int,
           fast: bool) -> _ServiceWatch:
    inner, max_tokens = _policy(kind, ordering, blocks=5000, seqs=seqs, mode="recompute")
    watch = _ServiceWatch(inner, max_seqs=seqs, max_tokens=max_tokens)
    record = Simulation([watch], LinearCost(), traffic, fast_path=fast).run()
    assert sum(r.preemptions for r in record.requests) == 0  # the cache holds everyone
    return watch


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["continuous", "chunked_prefill", "static"]),
       sizes=st.tuples(st.integers(5, 60), st.integers(5, 120)), seqs=st.integers(1, 8),
       late=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 2**16), fast=st.booleans())
def test_fair_share_keeps_backlogged_tenants_within_the_tolerance(kind, sizes, seqs, late,
                                                                 seed, fast):
    """While both tenants wait, their counters differ by at most 2 × max_num_seqs × the
    largest request's weighted tokens: each admission goes to the tenant behind (counting
    this step's admissions), and what a tenant's requests in flight add later is at most
    that much — also for a tenant that arrives late (it starts level, with no credit)."""
    traffic = _two_bursts(np.random.default_rng(seed), sizes, late)
    watch = _watch(kind, FairShareQueue(), traffic, seqs, fast)
    assert watch.widest_gap <= 2 * seqs * _largest_request_service(traffic)


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill", "static"])
def test_without_fair_share_the_gap_is_not_bounded(kind):
    """The same two bursts under FCFS: the first tenant is served alone until it is done."""
    traffic = _two_bursts(np.random.default_rng(3), (60, 120), 0.0)
    bound = 2 * 4 * _largest_request_service(traffic)
    fcfs = _watch(kind, FcfsQueue(), traffic, 4, fast=False)
    fair = _watch(kind, FairShareQueue(), traffic, 4, fast=False)
    assert fair.widest_gap <= bound < fcfs.widest_gap


def test_fair_share_head_changes_while_the_batch_only_decodes_and_the_fast_path_sees_it():
    """Tenant 0's big prompt heads the queue (its tenant is behind) but cannot fit the cache;
    tenant 1's small prompt waits behind it. Tenant 0's running request decodes, its counter
    passes tenant 1's, and the small prompt becomes the head and starts — mid-decode, so the
    fast path must step one by one to see it."""
    traffic = OpenLoopTraffic(
        arrival_s=np.array([0.0, 0.0, 0.005, 0.0051]),
        prompt_tokens=np.array([200, 16, 470, 16]),  # A1, R0, W0 (30 blocks), W1
        output_tokens=np.array([3, 300, 5, 5]),
        tenant=np.array([1, 0, 0, 1]), priority=np.zeros(4, dtype=np.int64),
    )
    started = []
    for fast in (False, True):
        policy = ContinuousBatching(pool=KVBlockPool(31, 16), max_num_seqs=8,
                                    max_num_batched_tokens=2048, ordering=FairShareQueue())
        requests = Simulation([policy], LinearCost(), traffic, fast_path=fast).run().requests
        a1, r0, w0, w1 = requests
        assert a1.finish_s < w1.first_scheduled_s < r0.finish_s <= w0.first_scheduled_s
        started.append(w1.first_scheduled_s)
    assert started[0] == started[1]
