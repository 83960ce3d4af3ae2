"""The shedding gateway (SLO classes, issue #20 item 3): overload is more requests waiting
than a class's threshold per replica; a shed request is rejected with its reason, never
dropped, and nothing is shed while the system is not overloaded."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from batchsim.policies.continuous import ContinuousBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.gateway import SHED_OVERLOAD, SheddingGateway, install_gateway
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.checked_policy import CheckedPolicy
from tests.policies.test_invariants import LinearCost


@dataclass
class _Waiting:
    num_waiting: int


@dataclass
class _Replica:
    policy: _Waiting


@dataclass
class _Inner:
    """A dispatcher that only records what reaches it."""

    replicas: list[_Replica]
    queued: int = 0
    arrived: list[Request] = field(default_factory=list)
    rejected: list[Request] = field(default_factory=list)

    def arrive(self, request: Request) -> None:
        self.arrived.append(request)

    def pump(self) -> None:
        return None

    def held(self) -> int:
        return self.queued

    def on_rejected(self, request: Request) -> None:
        self.rejected.append(request)


def test_overload_is_more_waiting_than_the_threshold_per_replica():
    # Two replicas with 3 and 2 waiting, 1 in the dispatcher's queue: 6 waiting in all.
    inner = _Inner([_Replica(_Waiting(3)), _Replica(_Waiting(2))], queued=1)
    gateway = SheddingGateway(inner, {1: 3.0, 2: 2.5})  # type: ignore[arg-type]
    kept = Request(0, 0.0, 10, 10, tenant=1)  # 6 > 3 × 2 is false: at the threshold, kept
    shed = Request(1, 0.0, 10, 10, tenant=2)  # 6 > 2.5 × 2: shed
    free = Request(2, 0.0, 10, 10, tenant=0)  # no threshold: never shed
    for request in (kept, shed, free):
        gateway.arrive(request)
    assert inner.arrived == [kept, free] and inner.rejected == [shed]
    assert shed.status is RequestStatus.REJECTED and shed.reject_kind == SHED_OVERLOAD
    assert shed.replica == -1
    assert shed.reject_reason.startswith("shed_overload: 6 requests waiting over 2 replicas")


def _traffic(rate: float, n: int = 200, seed: int = 4) -> OpenLoopTraffic:
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 2, n)
    return OpenLoopTraffic(arrival_s=np.cumsum(rng.exponential(1 / rate, n)),
                           prompt_tokens=rng.integers(32, 400, n),
                           output_tokens=rng.integers(8, 200, n),
                           tenant=tenant, priority=tenant.copy())


def _run(rate: float, shared_queue: bool, replicas: int = 2) -> list[Request]:
    policies = [CheckedPolicy(ContinuousBatching(pool=KVBlockPool(200, 16), max_num_seqs=16,
                                                 max_num_batched_tokens=2048,
                                                 swap_space=HostSwapSpace(0)),
                              max_seqs=16, max_tokens=2048) for _ in range(replicas)]
    simulation = Simulation(policies, LinearCost(), _traffic(rate), shared_queue=shared_queue)
    install_gateway(simulation, {1: 1.0})
    ended: list[int] = []
    on_done = simulation._on_done

    def count(request: Request) -> None:
        ended.append(request.request_id)
        on_done(request)

    simulation._on_done = count  # type: ignore[method-assign]
    for replica in simulation.replicas:
        replica.on_done = count
    requests = simulation.run().requests
    assert sorted(ended) == list(range(len(requests))), "every request ends exactly once"
    for policy in policies:
        assert policy.pool.num_used == 0
    return requests


@pytest.mark.parametrize("shared_queue", [False, True])
def test_under_overload_only_the_shed_class_is_refused_each_with_its_reason(shared_queue):
    requests = _run(rate=400.0, shared_queue=shared_queue)
    shed = [r for r in requests if r.status is RequestStatus.REJECTED]
    assert shed, "400 req/s overload two replicas"
    assert all(r.tenant == 1 and r.reject_kind == SHED_OVERLOAD and r.reject_reason
               for r in shed)
    assert all(r.status is RequestStatus.FINISHED for r in requests if r not in shed)


def test_nothing_is_shed_when_nothing_waits():
    requests = _run(rate=2.0, shared_queue=False)
    assert all(r.status is RequestStatus.FINISHED for r in requests)


def test_a_pool_at_zero_replicas_queues_for_the_one_it_starts():
    # An autoscaled pool at zero serving replicas holds its arrivals at the dispatcher while
    # one starts: they count against one replica's threshold, not against zero.
    inner = _Inner([], queued=2)
    gateway = SheddingGateway(inner, {1: 2.0})  # type: ignore[arg-type]
    gateway.arrive(Request(0, 0.0, 10, 10, tenant=1))  # 2 waiting, not > 2 × 1
    inner.queued = 3
    gateway.arrive(Request(1, 0.0, 10, 10, tenant=1))  # 3 > 2 × 1: shed
    assert [r.request_id for r in inner.arrived] == [0]
    assert [r.request_id for r in inner.rejected] == [1]
    assert "over 1 replicas" in (inner.rejected[0].reject_reason or "")
