"""The lifecycle of an autoscaled arm's replicas (docs/design.md §2, autoscaling).

The pool has a slot per replica it may ever run (`max_replicas` Replica objects, each with its
own policy and KV pool). A slot is

- stopped: released, costs nothing, takes no requests;
- starting: its cold start (container, model load) runs; paid for, serves nothing;
- serving: in the routable list the dispatcher chooses from;
- draining: out of the routable list; it finishes every request it holds, running *and*
  queued, where it is (a request is never handed back, so a drain changes nothing the replica
  itself does and the fast path stays exact), and stops when it holds none.

The routable list is one list object, shared with the dispatcher and changed in place, kept in
slot order so that routers' ties still go to the lowest index. Every change of the counts is
kept in `ScaleTimeline`, the record GPU-hours and the replicas-over-time series come from.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import simpy

from batchsim.sim.policy_protocol import BatchingPolicy


class SlotState(IntEnum):
    STOPPED = 0
    STARTING = 1
    SERVING = 2
    DRAINING = 3


class PoolReplica(Protocol):
    """What the pool needs of a replica."""

    index: int
    policy: BatchingPolicy


@dataclass(slots=True)
class ScaleTimeline:
    """Replicas serving, starting and draining from each change on (a second change at the
    same instant replaces the first), and the scale decisions taken."""

    t: array = field(default_factory=lambda: array("d"))
    serving: array = field(default_factory=lambda: array("q"))
    starting: array = field(default_factory=lambda: array("q"))
    draining: array = field(default_factory=lambda: array("q"))
    scale_ups: int = 0
    scale_downs: int = 0

    def record(self, now: float, serving: int, starting: int, draining: int) -> None:
        if len(self.t) and self.t[-1] == now:
            self.serving[-1], self.starting[-1], self.draining[-1] = serving, starting, draining
            return
        self.t.append(now)
        self.serving.append(serving)
        self.starting.append(starting)
        self.draining.append(draining)


def _holds_requests(replica: PoolReplica) -> bool:
    return replica.policy.num_running + replica.policy.num_waiting > 0


class ReplicaPool:
    """Slots of replicas and their states; `scale_to` starts or drains them (see the module).

    `on_serving` is called whenever a replica becomes routable, so that the dispatcher hands
    it what waits there. `holds(slot)` says whether a slot still holds work a drain must
    finish (default: requests queued or running; a prefill replica also keeps the KV of its
    finished prompts until it has crossed the link).
    """

    def __init__(self, env: simpy.Environment, replicas: Sequence[PoolReplica], initial: int,
                 cold_start_s: float, on_serving: Callable[[], None],
                 holds: Callable[[int], bool] | None = None) -> None:
        self.env = env
        self.holds = holds or (lambda slot: _holds_requests(replicas[slot]))
        self.replicas = replicas
        self.cold_start_s = cold_start_s
        self.on_serving = on_serving
        self.state = [SlotState.SERVING if i < initial else SlotState.STOPPED
                      for i in range(len(replicas))]
        self.routable: list[PoolReplica] = list(replicas[:initial])
        # A slot's start number: a cold start cancelled by a scale-down must not finish later.
        self._starts = [0] * len(replicas)
        self.timeline = ScaleTimeline()
        self._record()

    def count(self, state: SlotState) -> int:
        return self.state.count(state)

    def committed(self) -> int:
        """Replicas serving or starting: what the autoscaler's decisions count."""
        return self.count(SlotState.SERVING) + self.count(SlotState.STARTING)

    def scale_to(self, target: int) -> None:
        """Start stopped slots (lowest first) or stop starting ones and drain serving ones
        (highest first) until `target` replicas are serving or starting, as far as the
        stopped slots allow (a draining slot is not reused before it stops)."""
        committed = self.committed()
        if target > committed:
            self.timeline.scale_ups += 1
            stopped = [i for i, s in enumerate(self.state) if s is SlotState.STOPPED]
            for slot in stopped[: target - committed]:
                self._start(slot)
        elif target < committed:
            self.timeline.scale_downs += 1
            # A replica still loading serves no one: cancel those first.
            order = ([i for i, s in enumerate(self.state) if s is SlotState.STARTING][::-1]
                     + [i for i, s in enumerate(self.state) if s is SlotState.SERVING][::-1])
            for slot in order[: committed - target]:
                self._stop_or_drain(slot)
        self._record()

    def request_ended(self, slot: int) -> None:
        """A request of `slot` finished or was rejected (or, in a prefill pool, its KV left):
        a draining slot holding nothing stops."""
        if self.state[slot] is SlotState.DRAINING and not self.holds(slot):
            self.state[slot] = SlotState.STOPPED
            self._record()

    def _start(self, slot: int) -> None:
        self._starts[slot] += 1
        if self.cold_start_s == 0:
            self._serve(slot)
            return
        self.state[slot] = SlotState.STARTING
        self.env.process(self._cold_start(slot, self._starts[slot]))

    def _cold_start(self, slot: int, start: int) -> Generator[simpy.Event, object, None]:
        yield self.env.timeout(self.cold_start_s)
        if self._starts[slot] == start and self.state[slot] is SlotState.STARTING:
            self._serve(slot)
            self._record()

    def _serve(self, slot: int) -> None:
        self.state[slot] = SlotState.SERVING
        routable = self.routable
        first = self.replicas[0].index  # a decode pool's replicas follow the prefill pool's
        position = sum(1 for r in routable if r.index - first < slot)
        routable.insert(position, self.replicas[slot])
        self.on_serving()

    def _stop_or_drain(self, slot: int) -> None:
        if self.state[slot] is SlotState.STARTING:
            self.state[slot] = SlotState.STOPPED
            return
        self.routable.remove(self.replicas[slot])
        self.state[slot] = SlotState.DRAINING if self.holds(slot) else SlotState.STOPPED

    def _record(self) -> None:
        self.timeline.record(self.env.now, self.count(SlotState.SERVING),
                             self.count(SlotState.STARTING), self.count(SlotState.DRAINING))
