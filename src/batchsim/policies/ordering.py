"""Waiting-queue disciplines: which waiting request a policy considers next (docs/design.md §4).

Ordering is split from admission: a policy admits from the head of its waiting queue until the
head does not fit (head-of-line blocking, as vLLM does), and the queue alone decides which
request is the head. Disciplines:

- `fcfs`: arrival order — a plain deque, exactly the policies' behaviour before orderings.
- `priority`: lower `Request.priority` first (vLLM's convention), arrival order among equals.
- `shortest_prompt_first`: fewer prompt tokens first, arrival order among equals.
- `fair_share` (policies/fair_share.py): the tenant served least so far goes first.

Aging (priority, shortest_prompt_first) improves a request's rank linearly with its wait:
`key(now) = base − (now − arrival_s) × rate`. Every waiting request ages at the same rate, so the
order of two waiting requests never changes with time: it is the order of the fixed key
`base + arrival_s × rate`, computed once at push. Hence a heap suffices; the head changes only
when a request arrives or leaves, never during a decode-only stretch (the engine's fast path
stays exact); and nothing starves: a request r can be overtaken only by a request arriving
before `arrival_r + (base_r − base_min) / rate`, a bounded set under a bounded load.

Every discipline keeps vLLM's rule for preemption: a preempted request goes back ahead of
every request that has not started (`push_front`, newest victim last so admission order is
kept), whatever its key. It has been served already; letting new arrivals or better keys
overtake it would make preemption thrash and waste the work it did.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Protocol

from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan


class FrontLane(Protocol):
    """What preemption needs: put a victim back ahead of every request not yet started."""

    def push_front(self, request: Request) -> None: ...


class WaitingQueue(FrontLane, Protocol):
    """The waiting requests of one replica, in the order a policy should consider them."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Request]: ...

    def push(self, request: Request) -> None:
        """Queue a newly arrived request."""
        ...

    def head(self) -> Request:
        """The request to consider next (the queue must not be empty)."""
        ...

    def pop_head(self) -> Request:
        """Remove and return `head()`: the policy admitted it."""
        ...

    def oldest_arrival_s(self) -> float:
        """Arrival time of the longest-waiting request (the queue must not be empty)."""
        ...

    def head_may_change(self) -> bool:
        """Could the head change while the batch only decodes (no arrival, no finish)? The
        fast path steps one by one then, since a new head may fit where the old one did not."""
        ...

    def on_served(self, plan: StepPlan) -> None:
        """A step (and any steps the fast path applied in bulk before it) is about to be
        applied: called before the plan's tokens are added to the token accounts."""
        ...

    def on_finished(self, requests: list[Request]) -> None:
        """These requests finished and left the replica."""
        ...


class FcfsQueue(deque[Request]):
    """First come, first served: the deque the policies have always used, with the queue's
    method names (the aliases are deque's own C methods, so nothing is slower)."""

    __slots__ = ()

    push = deque.append
    push_front = deque.appendleft
    pop_head = deque.popleft

    def head(self) -> Request:
        return self[0]

    def oldest_arrival_s(self) -> float:
        # FCFS admits in arrival order, so anything preempted back to the front arrived
        # before everything still waiting behind it.
        return self[0].arrival_s

    def head_may_change(self) -> bool:
        return False

    def on_served(self, plan: StepPlan) -> None:
        return None

    def on_finished(self, requests: list[Request]) -> None:
        return None


class KeyedQueue:
    """Requests by a fixed sort key, ties in push order, behind a front lane of preempted ones."""

    __slots__ = ("_front", "_heap", "_key", "_pushed")

    def __init__(self, key: Callable[[Request], float]) -> None:
        self._key = key
        self._front: deque[Request] = deque()
        self._heap: list[tuple[float, int, Request]] = []
        self._pushed = 0

    def __len__(self) -> int:
        return len(self._front) + len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        yield from self._front
        yield from (entry[2] for entry in sorted(self._heap))

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (self._key(request), self._pushed, request))
        self._pushed += 1

    def push_front(self, request: Request) -> None:
        self._front.appendleft(request)

    def head(self) -> Request:
        return self._front[0] if self._front else self._heap[0][2]

    def pop_head(self) -> Request:
        return self._front.popleft() if self._front else heapq.heappop(self._heap)[2]

    def oldest_arrival_s(self) -> float:
        queued = (entry[2] for entry in self._heap)
        return min(r.arrival_s for r in chain(self._front, queued))

    def head_may_change(self) -> bool:
        return False  # keys are fixed at push (see the module docstring on aging)

    def on_served(self, plan: StepPlan) -> None:
        return None

    def on_finished(self, requests: list[Request]) -> None:
        return None


def priority_key(aging_s: float | None) -> Callable[[Request], float]:
    """Priority, improved by one level per `aging_s` seconds waited (if set)."""
    if aging_s is None:
        return lambda r: float(r.priority)
    return lambda r: r.priority + r.arrival_s / aging_s


def shortest_prompt_key(aging_tokens_per_s: float | None) -> Callable[[Request], float]:
    """Prompt tokens, less `aging_tokens_per_s` for every second waited (if set)."""
    if aging_tokens_per_s is None:
        return lambda r: float(r.prompt_tokens)
    return lambda r: r.prompt_tokens + r.arrival_s * aging_tokens_per_s
