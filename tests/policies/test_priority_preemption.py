"""Priority-aware preemption (SLO classes, issue #20 item 3): the victim is the running
request with the largest (priority, arrival time), as vLLM's `--scheduling-policy priority`
picks it, and it goes back into the waiting queue by its priority. On a small KV cache under
overload the high class keeps its TTFT target while the low class absorbs the preemptions.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.iteration_level import IterationLevelQueues
from batchsim.policies.ordering import FcfsQueue, KeyedQueue, priority_key
from batchsim.policies.preemption import VictimRule, priority_victim, take_victim
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.checked_policy import CheckedPolicy
from tests.policies.test_invariants import LinearCost, _check_conservation, workloads
from tests.policies.test_ordering_invariants import _tenant_traffic

TTFT_TARGET_S = 0.5  # the high class's target: LinearCost prefills a 128-token prompt in ~5 ms


def _running(*keys: tuple[int, float]) -> list[Request]:
    """Running requests in admission order, each (priority, arrival_s)."""
    return [Request(i, arrival, 10, 10, priority=priority)
            for i, (priority, arrival) in enumerate(keys)]


def test_the_victim_is_the_lowest_priority_then_the_latest_arrival():
    # Admission order 0..4. Priorities 1 are the lowest class; among them request 2 arrived
    # last (t=3.0), though request 3 (priority 0, t=4.0) and 4 (priority 1, t=2.0) were
    # admitted after it: vLLM's max((priority, arrival_time)) is request 2.
    running = _running((0, 0.0), (1, 1.0), (1, 3.0), (0, 4.0), (1, 2.0))
    assert priority_victim(running) == 2
    assert take_victim(running, "priority").request_id == 2
    assert [r.request_id for r in running] == [0, 1, 3, 4]
    # The newest rule ignores priority: the last admitted.
    assert take_victim(running, "newest").request_id == 4


def test_an_exact_tie_goes_to_the_most_recently_admitted():
    running = _running((1, 2.0), (0, 5.0), (1, 2.0))
    assert priority_victim(running) == 2


def _two_classes(seed: int = 3, n: int = 240) -> OpenLoopTraffic:
    """Interleaved classes at 40 req/s: class 0 (priority 0) short chats, class 1
    (priority 1) long generations; together they overfill a 300-block cache."""
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 2, n)
    return OpenLoopTraffic(
        arrival_s=np.cumsum(rng.exponential(1 / 40, n)),
        prompt_tokens=np.where(tenant == 0, rng.integers(64, 193, n), rng.integers(256, 513, n)),
        output_tokens=np.where(tenant == 0, rng.integers(16, 49, n), rng.integers(200, 401, n)),
        tenant=tenant, priority=tenant.copy(),
    )


def _policy(kind: str, rule: VictimRule) -> IterationLevelQueues:
    pool = KVBlockPool(300, 16)
    ordering = KeyedQueue(priority_key(None)) if rule == "priority" else FcfsQueue()
    if kind == "continuous":
        return ContinuousBatching(pool=pool, max_num_seqs=64, max_num_batched_tokens=1024,
                                  swap_space=HostSwapSpace(0), ordering=ordering,
                                  victim_rule=rule)
    return ChunkedPrefill(pool=pool, token_budget=512, max_num_seqs=64,
                          swap_space=HostSwapSpace(0), ordering=ordering, victim_rule=rule)


def _by_class(kind: str, rule: VictimRule, fast_path: bool = True
              ) -> dict[int, list[Request]]:
    inner = _policy(kind, rule)
    checked = CheckedPolicy(inner, max_seqs=64, max_tokens=None)
    record = Simulation([checked], LinearCost(), _two_classes(), fast_path=fast_path).run()
    assert all(r.status is RequestStatus.FINISHED for r in record.requests)
    checked.pool.check_invariants()
    assert checked.pool.num_used == 0
    return {c: [r for r in record.requests if r.tenant == c] for c in (0, 1)}


def _ttft_p99(requests: list[Request]) -> float:
    return float(np.percentile([r.first_token_s - r.arrival_s for r in requests], 99))


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_under_overload_the_high_class_keeps_its_slo_and_the_low_class_is_preempted(kind):
    fcfs = _by_class(kind, "newest")
    priority = _by_class(kind, "priority")
    # Newest-first preempts whoever came last, the high class included, and queues it
    # behind everything: it misses its target.
    assert sum(r.preemptions for r in fcfs[0]) > 0
    assert _ttft_p99(fcfs[0]) > TTFT_TARGET_S
    # Priority: the high class is never preempted and meets its target; the low class takes
    # every preemption.
    assert sum(r.preemptions for r in priority[0]) == 0
    assert sum(r.preemptions for r in priority[1]) > 0
    assert _ttft_p99(priority[0]) < TTFT_TARGET_S


@settings(max_examples=30, deadline=None)
@given(w=workloads, kind=st.sampled_from(["continuous", "chunked_prefill"]),
       blocks=st.integers(40, 200), seqs=st.integers(1, 16),
       mode=st.sampled_from(["recompute", "swap"]), aging=st.sampled_from([None, 0.5]),
       fast=st.booleans())
def test_priority_victims_keep_the_policy_invariants(w, kind, blocks, seqs, mode, aging, fast):
    """Budgets, KV accounting, token conservation and every request ending (CheckedPolicy),
    with victims taken from anywhere in the batch and re-queued by priority."""
    pool = KVBlockPool(blocks, 16)
    ordering = KeyedQueue(priority_key(aging))
    inner: IterationLevelQueues
    if kind == "continuous":
        inner = ContinuousBatching(pool=pool, max_num_seqs=seqs, max_num_batched_tokens=2000,
                                   preemption=mode, swap_space=HostSwapSpace(20),
                                   ordering=ordering, victim_rule="priority")
    else:
        inner = ChunkedPrefill(pool=pool, token_budget=256, max_num_seqs=seqs, preemption=mode,
                               swap_space=HostSwapSpace(20), ordering=ordering,
                               victim_rule="priority")
    checked = CheckedPolicy(inner, max_seqs=seqs, max_tokens=None)
    record = Simulation([checked], LinearCost(), _tenant_traffic(w), fast_path=fast).run()
    _check_conservation(record, checked)
