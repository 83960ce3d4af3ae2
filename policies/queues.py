"""The queues and bookkeeping that the iteration-level policies (continuous, chunked prefill)
share: a waiting queue, the running batch in admission order, admission control on arrival,
and the release of finished requests. Each policy adds its own `schedule`."""

from __future__ import annotations

from collections import deque

from policies.admission import AdmissionControl, KVReserve, steps_applied
from policies.iteration_level import reject_if_never_fits
from policies.preemption import PreemptionMode
from sim.kv_cache import HostSwapSpace, KVBlockPool
from sim.request import Request, RequestStatus
from sim.step_plan import StepOutcome, StepPlan, apply_tokens


class IterationLevelQueues:
    def __init__(
        self, *, pool: KVBlockPool, max_num_seqs: int, preemption: PreemptionMode,
        swap_space: HostSwapSpace | None, admission: AdmissionControl | None,
        reserve: KVReserve | None,
    ) -> None:
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.preemption: PreemptionMode = preemption
        self.swap_space = swap_space
        self.admission = admission
        self.reserve = reserve
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order; preemption takes from the end

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def has_room(self) -> bool:
        return not self.waiting and len(self.running) < self.max_num_seqs

    def _enqueue(self, request: Request, now: float) -> bool:
        """Queue a request unless it can never fit or admission control turns it away."""
        if not reject_if_never_fits(request, self.pool):
            return False
        if self.admission is not None and not self.admission.admits(
                request, num_waiting=len(self.waiting), has_room=self.has_room(), now=now):
            return False
        self.waiting.append(request)
        return True

    def _apply_step(self, plan: StepPlan, now: float) -> StepOutcome:
        """Apply the step's tokens and release the requests that finished."""
        if self.reserve is not None:
            self.reserve.on_steps(steps_applied(plan.requests, plan.contexts),
                                  preempted=bool(plan.preempted))
        outcome = apply_tokens(plan)
        if outcome.finished:
            if self.admission is not None:
                self.admission.on_finished(len(outcome.finished), now)
            for request in outcome.finished:
                self.pool.free(request.request_id)
                request.status = RequestStatus.FINISHED
            done = {id(r) for r in outcome.finished}
            self.running = [r for r in self.running if id(r) not in done]
        return outcome
