"""An arrival costs the same with one replica or many (issue #23): a router is handed only the
parts of the load it reads, and the requests in the system are a count kept as they arrive
and end, which must agree with the sum over the replicas wherever it is recorded."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from batchsim.policies.continuous import ContinuousBatching
from batchsim.sim.autoscaler import AutoscalerSettings
from batchsim.sim.dispatch import RoutedDispatch
from batchsim.sim.engine import Simulation
from batchsim.sim.gateway import install_gateway
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request
from batchsim.sim.routers import (
    READS_ALL,
    ReplicaLoad,
    least_kv,
    least_outstanding,
    prefix_affinity,
    reads_of,
    round_robin,
)
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.test_invariants import LinearCost


@dataclass
class _Counts:
    running: int
    waiting: int = 0

    @property
    def num_running(self) -> int:
        return self.running

    @property
    def num_waiting(self) -> int:
        return self.waiting


@dataclass
class _Replica:
    """A replica that counts what a dispatcher measured of it."""

    policy: _Counts
    free: int
    cached: int = 0
    reads: list[str] = field(default_factory=list)
    got: list[Request] = field(default_factory=list)

    def submit(self, request: Request) -> bool:
        self.got.append(request)
        return True

    def free_kv_blocks(self) -> int:
        self.reads.append("free")
        return self.free

    def cached_prefix_blocks(self, request: Request) -> int:
        self.reads.append("cached")
        return self.cached


def _replicas() -> list[_Replica]:
    return [_Replica(_Counts(3), 10, 1), _Replica(_Counts(1), 40, 2),
            _Replica(_Counts(1), 20, 2), _Replica(_Counts(2), 50, 0)]


def _arrive(router, replicas: list[_Replica], request_id: int = 5) -> int:
    request = Request(request_id, 0.0, 64, 8)
    request.prefix_keys = (1, 2, 3)
    RoutedDispatch(replicas, router, on_rejected=lambda r: None).arrive(request)  # type: ignore[arg-type]
    return next(i for i, r in enumerate(replicas) if r.got)


def test_round_robin_measures_no_replica():
    replicas = _replicas()
    assert _arrive(round_robin, replicas, request_id=6) == 2
    assert all(r.reads == [] for r in replicas)


@pytest.mark.parametrize(("router", "reads"), [
    (least_outstanding, []), (least_kv, ["free"]), (prefix_affinity, ["cached"]),
])
def test_a_router_is_measured_only_in_what_it_reads_and_chooses_as_with_everything(router,
                                                                                   reads):
    replicas = _replicas()
    chosen = _arrive(router, replicas)
    assert all(r.reads == reads for r in replicas)
    full = [ReplicaLoad(r.policy.num_running, r.free, r.cached) for r in _replicas()]
    assert chosen == router(full, 5)


def test_a_router_not_in_the_table_is_given_every_part():
    def custom(loads, sequence_number):
        return max(range(len(loads)), key=lambda i: loads[i].free_kv_blocks)

    assert reads_of(custom) is READS_ALL
    replicas = _replicas()
    assert _arrive(custom, replicas) == 3
    assert all(r.reads == ["free", "cached"] for r in replicas)


class _SummingSimulation(Simulation):
    """The requests in the system summed over the replicas at every read, as before issue
    #23."""

    def _in_system(self) -> int:
        queued = sum(r.policy.num_running + r.policy.num_waiting for r in self.replicas)
        return queued + self.dispatch.held()


def _traffic(n: int = 300, rate: float = 150.0, seed: int = 3) -> OpenLoopTraffic:
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 2, n)
    return OpenLoopTraffic(arrival_s=np.cumsum(rng.exponential(1 / rate, n)),
                           prompt_tokens=rng.integers(16, 3000, n),
                           output_tokens=rng.integers(4, 300, n),
                           tenant=tenant, priority=tenant.copy())


def _occupancy(kind: type[Simulation], *, shared_queue: bool = False, gateway: bool = False,
               autoscaler: AutoscalerSettings | None = None) -> list[tuple[float, float, int]]:
    """The occupancy series a run records (from, to, requests in the system), the last value
    at each instant."""
    policies = [ContinuousBatching(pool=KVBlockPool(120, 16), max_num_seqs=8,
                                   max_num_batched_tokens=2048, swap_space=HostSwapSpace(0))
                for _ in range(3)]
    # Rejections of every kind: over max_model_len, over the token budget or the cache at a
    # replica, and (with the gateway) shed on arrival.
    simulation = kind(policies, LinearCost(), _traffic(), router=least_outstanding,
                      max_model_len=3000, shared_queue=shared_queue, autoscaler=autoscaler)
    if gateway:
        install_gateway(simulation, {1: 1.0})
    record = simulation.run()
    assert {r.reject_kind for r in record.requests} >= {"max_model_len", "kv_cache_too_small"}
    steps = record.steps  # the spans not yet folded into the bins: all of them in a short run
    series = list(zip(steps._occupancy_from, steps._occupancy_to, steps._occupancy_count,
                      strict=True))
    return [*series, (steps._occupancy_t, math.inf, steps._occupancy_n)]


@pytest.mark.parametrize(("shared_queue", "gateway"), [(False, False), (True, False),
                                                       (False, True)])
def test_the_kept_count_records_what_the_sum_over_replicas_did(shared_queue, gateway):
    kept = _occupancy(Simulation, shared_queue=shared_queue, gateway=gateway)
    assert kept == _occupancy(_SummingSimulation, shared_queue=shared_queue, gateway=gateway)
    assert kept[-1][2] == 0 and max(n for _, _, n in kept) > 8


def test_the_kept_count_holds_in_an_autoscaled_pool():
    settings = AutoscalerSettings(min_replicas=0, max_replicas=3, initial_replicas=1,
                                  metric="outstanding", target=4.0, interval_s=0.2,
                                  scale_up_window_s=0.0, scale_down_window_s=0.4,
                                  cold_start_s=0.3)
    assert _occupancy(Simulation, autoscaler=settings) == _occupancy(_SummingSimulation,
                                                                     autoscaler=settings)
