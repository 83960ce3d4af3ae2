"""The queues and bookkeeping that the iteration-level policies (continuous, chunked prefill)
share: a waiting queue, the running batch in admission order, admission control on arrival,
and the release of finished requests. Each policy adds its own `schedule`."""

from __future__ import annotations

import math

from batchsim.policies.admission import AdmissionControl, KVReserve, ReserveGate, steps_applied
from batchsim.policies.budget import StepBudget
from batchsim.policies.iteration_level import decode_repeat_steps, reject_if_never_fits
from batchsim.policies.ordering import FcfsQueue, WaitingQueue
from batchsim.policies.preemption import PreemptionMode, swap_in
from batchsim.policies.speculative import (
    Speculation,
    accept_proposals,
    is_decode,
    shape_speculative_step,
)
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepOutcome, StepPlan, apply_tokens


class IterationLevelQueues:
    def __init__(
        self, *, pool: KVBlockPool, max_num_seqs: int, preemption: PreemptionMode,
        swap_space: HostSwapSpace | None, admission: AdmissionControl | None,
        reserve: KVReserve | None, ordering: WaitingQueue | None = None,
        speculation: Speculation | None = None,
    ) -> None:
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.preemption: PreemptionMode = preemption
        self.swap_space = swap_space
        self.admission = admission
        self.reserve = reserve
        # Which waiting request is considered next (policies/ordering.py); FCFS by default.
        self.waiting: WaitingQueue = FcfsQueue() if ordering is None else ordering
        self.running: list[Request] = []  # admission order; preemption takes from the end
        self.speculation = speculation
        # KV slots and budget tokens a decode holds beyond its own token: its proposals.
        self.lookahead = 0 if speculation is None else speculation.k
        # Whether the engine asks how long a plan repeats (its fast path; stepping one by one
        # it never does): once it has, a decode-only plan counts the answer's inputs while
        # planning (`schedule_all_decodes`' `stretch_ahead`).
        self._engine_stretches = False

    def _stretch_ahead(self) -> bool:
        """Plan a decode-only step with what the engine's stretch asks, counted in the same
        pass: when the engine stretches and no request waits (the plan is then all decodes)."""
        return self._engine_stretches and not self.waiting

    def _lookahead_of(self, request: Request, tokens: int) -> int:
        """Extra tokens `request` computes this step if `tokens` make it a verification."""
        return self.lookahead if self.lookahead and is_decode(request, tokens) else 0

    def _shape(self, plan: StepPlan) -> StepPlan:
        """The planned step's cost shape, with decodes verifying proposals when speculating."""
        plan.use_token_shape()
        if self.speculation is not None:
            shape_speculative_step(plan, self.speculation)
        return plan

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
        self.waiting.push(request)
        return True

    def _reserve_gate(self) -> ReserveGate | None:
        """The conservative-admission check for this step's admissions, if configured."""
        if self.reserve is None or not self.waiting:
            return None
        return ReserveGate(self.reserve, self.running, self.pool)

    def _cached_prefix(self, request: Request) -> int:
        """Prompt blocks of the waiting `request` it would find in the prefix cache if admitted
        now (0 without prefix caching, or for a request that kept its KV by swapping). At
        least one prompt token is always left to compute: it produces the first token."""
        if not request.prefix_keys or request.num_computed_tokens or request.swapped_out:
            return 0
        limit = (request.prompt_tokens - 1) // self.pool.block_size
        return self.pool.cached_prefix_blocks(request.prefix_keys, limit)

    def _try_admit(self, request: Request, tokens: int, plan: StepPlan, budget: StepBudget,
                   gate: ReserveGate | None, now: float, cached_blocks: int = 0) -> bool:
        """Move the head of the queue into the batch with `tokens` to compute this step after
        its `cached_blocks` prefix blocks found cached, if the conservative reserve (when set)
        and the free KV allow it; False stops admission."""
        if gate is not None and not gate.admit(request):
            budget.stop_reason = "kv_reserve"
            return False
        if not self._allocate_admitted(request, tokens, cached_blocks):
            budget.stop_reason = "kv_cache_full"
            return False
        self.waiting.pop_head()
        swap_in(request, self.swap_space, plan)
        request.status = RequestStatus.RUNNING
        if math.isnan(request.first_scheduled_s):
            request.first_scheduled_s = now
        self.running.append(request)
        budget.take(tokens)
        plan.add(request, tokens)
        return True

    def _allocate_admitted(self, request: Request, tokens: int, cached_blocks: int) -> bool:
        if not cached_blocks:
            return self.pool.allocate(request.request_id, request.num_computed_tokens + tokens)
        cached_tokens = cached_blocks * self.pool.block_size
        if not self.pool.allocate_with_prefix(request.request_id,
                                              request.prefix_keys[:cached_blocks],
                                              cached_tokens + tokens):
            return False
        request.num_computed_tokens = cached_tokens  # their KV is already in the cache
        if math.isnan(request.first_scheduled_s):
            request.cached_tokens = cached_tokens
        return True

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        """Steps until the decoding batch would need more KV blocks than are free.

        Only a plan holding every running request repeats. A request left waiting stays blocked
        while the batch only decodes: the running count and the budget left after the decodes
        do not change, and free KV only shrinks. While conservative admission's ratio decays,
        a blocked request may become admissible, so the policy steps one by one; likewise
        while the ordering's head may change without an arrival (fair share, two tenants
        waiting): a new head might fit where the old one did not. A speculating batch steps
        one by one: how many tokens each step emits is random.
        """
        self._engine_stretches = True
        if self.speculation is not None:
            return 1
        if self.reserve is not None and self.reserve.blocks_stretch(len(self.waiting)):
            return 1
        if self.waiting.head_may_change():
            return 1
        steps = decode_repeat_steps(plan, len(self.running), self.pool, horizon)
        if plan.kv_growth is not None and self._eviction_may_unblock():
            # Stop before the first step whose growth evicts a cached block.
            evicting = plan.kv_growth.steps_within(self.pool.num_free_uncached, horizon)
            steps = min(steps, max(1, evicting))
        return steps

    def _eviction_may_unblock(self) -> bool:
        """Whether evicting cached blocks could let the blocked head of the queue in. Not for
        a whole-prompt admission: it needs its uncached blocks from the free ones either way,
        and eviction only shrinks what it finds cached (see ChunkedPrefill)."""
        return False

    def _apply_step(self, plan: StepPlan, now: float) -> StepOutcome:
        """Apply the step's tokens and release the requests that finished."""
        if self.reserve is not None:
            self.reserve.on_steps(steps_applied(plan.requests, plan.contexts),
                                  preempted=bool(plan.preempted))
        self.waiting.on_served(plan)
        outcome = apply_tokens(plan)
        if self.speculation is not None:
            accept_proposals(plan, outcome, self.speculation)
        if self.pool.prefix_caching:
            for request in plan.requests:  # computed prompt blocks become shareable
                self.pool.cache_blocks(request.request_id, request.prefix_keys,
                                       request.num_computed_tokens)
        if outcome.finished:
            self.waiting.on_finished(outcome.finished)
            if self.admission is not None:
                self.admission.on_finished(len(outcome.finished), now)
            for request in outcome.finished:
                self.pool.free(request.request_id, request.prefix_keys,
                               request.num_computed_tokens)
                request.status = RequestStatus.FINISHED
                if self.speculation is not None:
                    self.speculation.forget(request)
            done = {id(r) for r in outcome.finished}
            self.running = [r for r in self.running if id(r) not in done]
        return outcome
