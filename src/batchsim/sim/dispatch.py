"""How arrivals reach replicas: routed on arrival, or held in one shared FCFS queue.

With a router each request is assigned to a replica the moment it arrives and queues there.
With a shared queue it waits in one central FIFO and goes to the first replica (lowest index)
that has room to start it — the multi-server queue of queueing theory (M/M/c at batch size 1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.request import Request
from batchsim.sim.routers import ReplicaLoad, Router, reads_of


class Submittable(Protocol):
    """What a dispatcher needs from a replica."""

    policy: BatchingPolicy

    def submit(self, request: Request) -> bool: ...

    def free_kv_blocks(self) -> int: ...

    def cached_prefix_blocks(self, request: Request) -> int: ...

    def tiered_prefix_blocks(self, request: Request) -> int: ...


class Dispatcher(Protocol):
    def arrive(self, request: Request) -> None:
        """Take a new request (already checked against max_model_len)."""
        ...

    def pump(self) -> None:
        """A replica's state changed: hand out what can now start."""
        ...

    def held(self) -> int:
        """Requests waiting in the dispatcher itself, not yet at any replica."""
        ...


OnRejected = Callable[[Request], None]
# The load handed to a router that reads none of it.
_UNREAD = ReplicaLoad(0, 0)


class RoutedDispatch:
    def __init__(self, replicas: Sequence[Submittable], router: Router,
                 on_rejected: OnRejected) -> None:
        self.replicas = replicas
        self.router = router
        self.reads = reads_of(router)
        self.on_rejected = on_rejected
        # Arrivals while no replica serves (an autoscaled pool at zero), in arrival order.
        self.waiting: deque[Request] = deque()

    def arrive(self, request: Request) -> None:
        if not self.replicas:
            self.waiting.append(request)
            return
        if len(self.replicas) == 1:  # nothing to choose: skip measuring the load
            if not self.replicas[0].submit(request):
                self.on_rejected(request)
            return
        index = self.router(self._loads(request), request.request_id)
        if not self.replicas[index].submit(request):
            self.on_rejected(request)

    def _loads(self, request: Request) -> Sequence[ReplicaLoad]:
        """Every replica's load at `request`'s arrival, measured only in the parts the router
        reads: a router that reads none gets the same empty load for each replica, so an
        arrival costs the same with one replica or many."""
        reads = self.reads
        if not reads.any:
            return [_UNREAD] * len(self.replicas)
        prefix = reads.cached_prefix_blocks and bool(request.prefix_keys)
        return [ReplicaLoad(
            r.policy.num_running + r.policy.num_waiting if reads.outstanding else 0,
            r.free_kv_blocks() if reads.free_kv_blocks else 0,
            r.cached_prefix_blocks(request) if prefix else 0,
        ) for r in self.replicas]

    def pump(self) -> None:
        while self.waiting and self.replicas:  # a replica serves again: route them in order
            self.arrive(self.waiting.popleft())

    def held(self) -> int:
        return len(self.waiting)


class SharedQueueDispatch:
    def __init__(self, replicas: Sequence[Submittable], on_rejected: OnRejected) -> None:
        self.replicas = replicas
        self.on_rejected = on_rejected
        self.queue: deque[Request] = deque()

    def arrive(self, request: Request) -> None:
        self.queue.append(request)
        self.pump()

    def pump(self) -> None:
        while self.queue:
            replica = next((r for r in self.replicas if r.policy.has_room()), None)
            if replica is None:
                return
            request = self.queue.popleft()
            if not replica.submit(request):
                self.on_rejected(request)

    def held(self) -> int:
        return len(self.queue)
