"""Continuous (iteration-level) batching, vLLM-style, without chunked prefill (docs/design.md §4).

Each step: running requests first, in admission order, each allocating the KV for its next
token or preempting the most recently admitted running request (with `victim_rule="priority"`
the lowest-priority one, policies/preemption.py) until it can; then, only if
nothing was preempted this step, waiting requests in the waiting queue's order (FCFS by default,
see policies/ordering.py) while the sequence budget, the token budget and the KV cache allow.
A new request's whole prompt is prefilled in one step, so a long prompt stalls everyone's
decode for that step.
"""

from __future__ import annotations

from batchsim.policies.admission import AdmissionControl, KVReserve
from batchsim.policies.budget import StepBudget
from batchsim.policies.iteration_level import (
    IterationLevelQueues,
    schedule_all_decodes,
    unschedule,
)
from batchsim.policies.ordering import WaitingQueue
from batchsim.policies.preemption import PreemptionMode, VictimRule, allocate_or_preempt
from batchsim.policies.speculative import Speculation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepOutcome, StepPlan


class ContinuousBatching(IterationLevelQueues):
    def __init__(
        self,
        *,
        pool: KVBlockPool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        preemption: PreemptionMode = "recompute",
        swap_space: HostSwapSpace | None = None,
        admission: AdmissionControl | None = None,
        reserve: KVReserve | None = None,
        ordering: WaitingQueue | None = None,
        speculation: Speculation | None = None,
        victim_rule: VictimRule = "newest",
    ) -> None:
        super().__init__(pool=pool, max_num_seqs=max_num_seqs, preemption=preemption,
                         swap_space=swap_space, admission=admission, reserve=reserve,
                         ordering=ordering, speculation=speculation, victim_rule=victim_rule)
        self.max_num_batched_tokens = max_num_batched_tokens

    def add_request(self, request: Request, now: float) -> bool:
        if request.prompt_tokens > self.max_num_batched_tokens:
            request.reject(
                f"prompt of {request.prompt_tokens} tokens exceeds max_num_batched_tokens="
                f"{self.max_num_batched_tokens} and prefill is not chunked",
                kind="prompt_exceeds_token_budget",
            )
            return False
        return self._enqueue(request, now)

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = StepBudget(self.max_num_batched_tokens, self.max_num_seqs)
        # Every running request has its first token and one pending token: the whole prompt
        # was prefilled in the step that admitted it.
        if not schedule_all_decodes(self.running, self.pool, plan, budget, self.lookahead,
                                    stretch_ahead=self._stretch_ahead()):
            self._schedule_running(plan, budget)
        if self.waiting and not plan.preempted:
            self._schedule_waiting(plan, budget, now)
        self._plan_past_self_preemption(plan, lambda again: self._schedule_running(
            again, StepBudget(self.max_num_batched_tokens, self.max_num_seqs)))
        return self._shape(plan)

    def _schedule_running(self, plan: StepPlan, budget: StepBudget) -> None:
        """Running requests in admission order until one does not fit. The choices join the
        plan only at the end: a priority victim may be one already chosen this step, which
        then gives its tokens back (as vLLM v1 unschedules it)."""
        chosen: dict[Request, tuple[int, int]] = {}  # tokens, and the budget they took
        index = 0
        while index < len(self.running):
            request = self.running[index]
            need = request.num_uncomputed_tokens
            lookahead = self._lookahead_of(request, need)
            if not budget.fits(need + lookahead):
                break
            first_victim = len(plan.preempted)
            if not self._allocate_or_preempt(request, lookahead, plan):
                break  # the request preempted itself: the step stops here, as in vLLM
            if len(plan.preempted) > first_victim:
                unschedule(plan.preempted[first_victim:], chosen, budget)
                index = self.running.index(request)  # victims before it moved it forward
            budget.take(need + lookahead)
            chosen[request] = (need, need + lookahead)
            index += 1
        for request, (tokens, _) in chosen.items():
            plan.add(request, tokens)

    def _allocate_or_preempt(self, request: Request, lookahead: int, plan: StepPlan) -> bool:
        """Reserve KV for `request`'s next tokens (and its proposals' slots), preempting by the
        arm's victim rule; False if it went."""
        return allocate_or_preempt(
            request, request.num_tokens + lookahead, running=self.running, waiting=self.waiting,
            pool=self.pool, mode=self.preemption, swap_space=self.swap_space, plan=plan,
            victim_rule=self.victim_rule,
        )

    def _schedule_waiting(self, plan: StepPlan, budget: StepBudget, now: float) -> None:
        """Admission of whole prompts in queue order: the head blocks those behind it."""
        gate = self._reserve_gate()
        while self.waiting:
            request = self.waiting.head()
            cached = self._cached_prefix(request)
            need = request.num_uncomputed_tokens - cached * self.pool.block_size
            if not budget.fits(need) or not self._try_admit(request, need, plan, budget, gate,
                                                            now, cached):
                break

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        return self._apply_step(plan, now)
