"""The small protocol through which the engine drives a batching policy (docs/design.md §4).

`sim` never imports a policy: policies implement this protocol and the application wires them.
"""

from __future__ import annotations

from typing import Protocol

from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepOutcome, StepPlan


class BatchingPolicy(Protocol):
    """Owns the queues of one replica and decides each step; never sees SimPy."""

    pool: KVBlockPool

    def add_request(self, request: Request, now: float) -> bool:
        """Queue a request; return False after `request.reject(reason)` if it can never run."""
        ...

    def schedule(self, now: float) -> StepPlan:
        """Plan the next step (an empty plan means nothing can run now)."""
        ...

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        """Apply the step's tokens, release what finished, and report it."""
        ...

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        """The fast path's question (docs/design.md §11): of the next `horizon` steps, how many
        would
        repeat `plan` unchanged — each request one more token, contexts one longer — if nothing
        arrived? Answer 1 to step normally. The engine asks only about decode-only plans without
        preemption, and bounds `horizon` by the first request to finish; the policy bounds it by
        whatever it owns (KV blocks, queued requests it might admit)."""
        ...

    def has_work(self) -> bool: ...

    def has_room(self) -> bool:
        """Would a newly queued request start at the next step (KV permitting)? A shared
        dispatch queue hands requests only to replicas that have room."""
        ...

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...
