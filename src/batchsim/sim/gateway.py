"""A gateway in front of dispatch that sheds lower classes under overload (SLO classes,
docs/how-to/slo-classes.md).

Overload is counted, never estimated: the requests already waiting — in every replica's waiting
queue (preempted ones included) and in the dispatcher's own queue — against a class's threshold
times the replicas. A request of a class with a threshold is rejected with its reason when the
count exceeds it; every other request goes on to dispatch untouched. Running requests are not
counted: a full batch with nothing waiting is busy, not overloaded. The count is what
stepping one by one would see mid-stretch too: a stretch of the fast path runs only while no
waiting request can start, and an arrival at the stretching replica cuts it, so no waiting
queue changes inside one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from batchsim.sim.dispatch import (
    Dispatcher,
    OnRejected,
    RoutedDispatch,
    SharedQueueDispatch,
    Submittable,
)
from batchsim.sim.engine import Simulation
from batchsim.sim.request import Request

SHED_OVERLOAD = "shed_overload"


class Gated(Dispatcher, Protocol):
    """What the gateway needs from the dispatcher behind it: the replicas it serves with now
    (an autoscaled pool's change) and its rejection path."""

    replicas: Sequence[Submittable]
    on_rejected: OnRejected


class SheddingGateway:
    """A `Dispatcher` that refuses the classes in `thresholds` (tenant index -> most waiting
    requests per replica) while overloaded and hands every other arrival to `inner`."""

    def __init__(self, inner: Gated, thresholds: Mapping[int, float]) -> None:
        self.inner = inner
        self.thresholds = dict(thresholds)

    def waiting(self) -> int:
        """Requests waiting to start anywhere: at the replicas and in the dispatcher."""
        return sum(r.policy.num_waiting for r in self.inner.replicas) + self.inner.held()

    def serving(self) -> int:
        """The replicas the threshold is multiplied by: those serving now, and at least one,
        so that a pool an autoscaler took to zero queues for the replica it starts rather
        than shedding everything until that replica is up."""
        return max(len(self.inner.replicas), 1)

    def arrive(self, request: Request) -> None:
        limit = self.thresholds.get(request.tenant)
        if limit is not None:
            waiting = self.waiting()
            if waiting > limit * self.serving():
                self._shed(request, waiting, limit)
                return
        self.inner.arrive(request)

    def _shed(self, request: Request, waiting: int, limit: float) -> None:
        request.replica = -1  # no replica saw it
        request.reject(
            f"{SHED_OVERLOAD}: {waiting} requests waiting over {self.serving()} "
            f"replicas exceed tenant {request.tenant}'s max_queued_per_replica={limit:g}",
            kind=SHED_OVERLOAD,
        )
        self.inner.on_rejected(request)

    def pump(self) -> None:
        self.inner.pump()

    def held(self) -> int:
        return self.inner.held()


def install_gateway(simulation: Simulation, thresholds: Mapping[int, float]) -> SheddingGateway:
    """Put a shedding gateway in front of a colocated simulation's dispatch; its rejections
    take the dispatcher's own path (finish time, record, a closed-loop user's wake-up)."""
    inner = simulation.dispatch
    assert isinstance(inner, RoutedDispatch | SharedQueueDispatch), "a colocated simulation"
    gateway = SheddingGateway(inner, thresholds)
    simulation.dispatch = gateway
    return gateway
