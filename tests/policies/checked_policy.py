"""A policy wrapper for tests: asserts the scheduling invariants around every step."""

from __future__ import annotations

from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepOutcome, StepPlan


class CheckedPolicy:
    """Delegates to a real policy and checks budgets, KV accounting and token accounting."""

    def __init__(self, inner: BatchingPolicy, *, max_seqs: int, max_tokens: int | None) -> None:
        self.inner = inner
        self.pool = inner.pool
        self.max_seqs = max_seqs
        self.max_tokens = max_tokens
        self.steps = 0
        self.preempting_steps = 0
        self.stretched_steps = 0  # steps the fast path may apply without on_step_done

    @property
    def num_running(self) -> int:
        return self.inner.num_running

    @property
    def num_waiting(self) -> int:
        return self.inner.num_waiting

    def has_work(self) -> bool:
        return self.inner.has_work()

    def has_room(self) -> bool:
        return self.inner.has_room()

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        steps = self.inner.repeatable_steps(plan, horizon)
        assert 1 <= steps <= horizon
        self.stretched_steps += steps - 1
        return steps

    def add_request(self, request: Request, now: float) -> bool:
        accepted = self.inner.add_request(request, now)
        assert accepted == (request.status is not RequestStatus.REJECTED)
        assert accepted or request.reject_reason
        return accepted

    def schedule(self, now: float) -> StepPlan:
        was_running = {id(r) for r in getattr(self.inner, "running", [])}
        plan = self.inner.schedule(now)
        assert len(plan.requests) <= self.max_seqs
        assert len({id(r) for r in plan.requests}) == len(plan.requests), "scheduled twice"
        if self.max_tokens is not None:
            assert plan.total_new_tokens <= self.max_tokens
        if plan.preempted:
            self.preempting_steps += 1
            # vLLM rule: a step that preempted admits nobody new.
            assert all(id(r) in was_running for r in plan.requests)
        for request, n in zip(plan.requests, plan.num_new_tokens, strict=True):
            assert n >= 1
            assert request.num_computed_tokens + n <= request.num_tokens
            held = self.pool.held(request.request_id)
            assert held * self.pool.block_size >= request.num_computed_tokens + n
        self.pool.check_invariants()
        return plan

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        self.steps += 1
        outcome = self.inner.on_step_done(plan, now)
        for request in outcome.finished:
            assert request.num_generated == request.output_tokens
            assert self.pool.held(request.request_id) == 0 or request in getattr(
                self.inner, "batch", []
            )
        self.pool.check_invariants()
        return outcome
