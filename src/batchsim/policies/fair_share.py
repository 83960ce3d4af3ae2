"""Per-tenant fair share by tokens served: a virtual token counter per tenant (docs/design.md §4).

The design follows the idea of Sheng et al., "Fairness in Serving Large Language Models"
(OSDI'24): serve next the backlogged tenant that has been served least. Each tenant has a
counter of the service it received, `input_weight × input tokens + output_weight × output
tokens`, where a step's tokens for a request are counted as one output token if it emitted a
token and input tokens for the rest (prefill, and recomputation after a preemption: it is GPU
work done for that tenant). The head of the queue is the oldest waiting request of the tenant
with the smallest counter (ties: the older head).

- **No banked credit.** A tenant that becomes active (a request arrives while it has none
  waiting or running) is lifted to the smallest counter of the other active tenants — or, when
  none is active, to the largest counter of all — so idling never earns priority later.
- **Within a step.** Counters grow when tokens are served (`on_served`, at the end of each
  step). Until then each request taken this step is charged provisionally with its uncomputed
  tokens, so one step's admissions alternate between tenants instead of all going to the one
  that was behind.
- **Exact under the fast path.** A counter is `base + weighted integer token totals`, a function
  of the totals whatever the grouping of steps; lifts happen at step ends or when the head is
  asked for, both the same stepping one by one or many steps at a time. The head can change
  during a decode-only stretch only if two tenants wait (their counters grow at different
  rates), and then the policy steps one by one (`head_may_change`).
- Preempted requests go back ahead of everyone (see policies/ordering.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain

from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan


@dataclass(slots=True)
class _TenantAccount:
    base: float = 0.0  # the counter at the last lift
    input_tokens: int = 0  # served since the last lift
    output_tokens: int = 0
    in_system: int = 0  # requests waiting or running here
    waiting: deque[tuple[int, Request]] = field(default_factory=deque)  # (push order, request)


class FairShareQueue:
    """Waiting requests per tenant; the head belongs to the least-served backlogged tenant."""

    def __init__(self, input_weight: float = 1.0, output_weight: float = 2.0) -> None:
        if input_weight < 0 or output_weight < 0 or input_weight + output_weight <= 0:
            raise ValueError("fair share needs non-negative token weights, not both zero")
        self.input_weight = input_weight
        self.output_weight = output_weight
        self._accounts: dict[int, _TenantAccount] = {}
        self._front: deque[Request] = deque()
        self._num_queued = 0  # requests in the tenants' queues (not the front lane)
        self._pushed = 0
        self._newly_active: list[int] = []  # tenants to lift before the next choice
        self._provisional: dict[int, float] = {}  # this step's admissions, not yet served

    # --- the counters ----------------------------------------------------------------------

    def counter(self, tenant: int) -> float:
        """The tenant's virtual token counter (0 for a tenant never seen)."""
        account = self._accounts.get(tenant)
        if account is None:
            return 0.0
        return account.base + (self.input_weight * account.input_tokens
                               + self.output_weight * account.output_tokens)

    def _lift_newly_active(self) -> None:
        if not self._newly_active:
            return
        new = sorted(set(self._newly_active))
        self._newly_active.clear()
        others = [self.counter(t) for t, a in self._accounts.items()
                  if a.in_system > 0 and t not in new]
        target = min(others) if others else max(self.counter(t) for t in self._accounts)
        for tenant in new:
            if target > self.counter(tenant):
                account = self._accounts[tenant]
                account.base, account.input_tokens, account.output_tokens = target, 0, 0

    def _choose(self) -> _TenantAccount:
        """The backlogged tenant with the least counter (with this step's provisional
        charges); ties go to the tenant whose head request was queued first."""
        self._lift_newly_active()
        best: tuple[float, int] | None = None
        chosen: _TenantAccount | None = None
        for tenant, account in self._accounts.items():
            if not account.waiting:
                continue
            rank = (self.counter(tenant) + self._provisional.get(tenant, 0.0),
                    account.waiting[0][0])
            if best is None or rank < best:
                best, chosen = rank, account
        assert chosen is not None, "head of an empty queue"
        return chosen

    # --- the queue -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._front) + self._num_queued

    def __iter__(self) -> Iterator[Request]:
        yield from self._front
        queued = [entry for a in self._accounts.values() for entry in a.waiting]
        yield from (request for _, request in sorted(queued, key=lambda e: e[0]))

    def push(self, request: Request) -> None:
        account = self._accounts.get(request.tenant)
        if account is None:
            account = self._accounts[request.tenant] = _TenantAccount()
        if account.in_system == 0:
            self._newly_active.append(request.tenant)
        account.in_system += 1
        account.waiting.append((self._pushed, request))
        self._pushed += 1
        self._num_queued += 1

    def push_front(self, request: Request) -> None:
        self._front.appendleft(request)

    def head(self) -> Request:
        return self._front[0] if self._front else self._choose().waiting[0][1]

    def pop_head(self) -> Request:
        if self._front:
            request = self._front.popleft()
        else:
            request = self._choose().waiting.popleft()[1]
            self._num_queued -= 1
        charge = self.input_weight * request.num_uncomputed_tokens
        self._provisional[request.tenant] = self._provisional.get(request.tenant, 0.0) + charge
        return request

    def oldest_arrival_s(self) -> float:
        queued = (r for a in self._accounts.values() for _, r in a.waiting)
        return min(r.arrival_s for r in chain(self._front, queued))

    def head_may_change(self) -> bool:
        if self._front:
            return False
        return sum(1 for a in self._accounts.values() if a.waiting) >= 2

    def on_served(self, plan: StepPlan) -> None:
        for request, new, context in zip(plan.requests, plan.num_new_tokens, plan.contexts,
                                         strict=True):
            # Tokens the fast path already applied in bulk: one decode step each.
            bulk = request.num_computed_tokens - context
            emitted = int(request.num_computed_tokens + new == request.num_tokens)
            account = self._accounts[request.tenant]
            account.input_tokens += new - emitted
            account.output_tokens += bulk + emitted
        self._provisional.clear()
        self._lift_newly_active()

    def on_finished(self, requests: list[Request]) -> None:
        for request in requests:
            self._accounts[request.tenant].in_system -= 1
