"""Continuous (iteration-level) batching, vLLM-style, without chunked prefill (DESIGN §4).

Each step: running requests first, in admission order, each allocating the KV for its next
token or preempting the most recently admitted running request until it can; then, only if
nothing was preempted this step, waiting requests in FCFS order while the sequence budget, the
token budget and the KV cache allow. A new request's whole prompt is prefilled in one step, so a
long prompt stalls everyone's decode for that step.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from policies.budget import StepBudget
from policies.preemption import PreemptionMode, preempt, swap_in
from sim.kv_cache import HostSwapSpace, KVBlockPool
from sim.request import Request, RequestStatus
from sim.step_plan import StepOutcome, StepPlan, apply_tokens
from sim.stretch import extra_blocks_by_step


class ContinuousBatching:
    def __init__(
        self,
        *,
        pool: KVBlockPool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        preemption: PreemptionMode = "recompute",
        swap_space: HostSwapSpace | None = None,
    ) -> None:
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.preemption: PreemptionMode = preemption
        self.swap_space = swap_space
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def add_request(self, request: Request, now: float) -> bool:
        # The simulator knows the output length; a request that could not fit in the whole
        # cache even alone would be preempted forever, so it is rejected up front with a reason.
        need = self.pool.blocks_for(request.prompt_tokens + request.output_tokens)
        if need > self.pool.num_blocks:
            request.reject(
                f"needs {need} KV blocks for prompt+output, the cache has {self.pool.num_blocks}"
            )
            return False
        if request.prompt_tokens > self.max_num_batched_tokens:
            request.reject(
                f"prompt of {request.prompt_tokens} tokens exceeds max_num_batched_tokens="
                f"{self.max_num_batched_tokens} and prefill is not chunked"
            )
            return False
        self.waiting.append(request)
        return True

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = StepBudget(self.max_num_batched_tokens, self.max_num_seqs)
        if not self._schedule_all_decodes(plan, budget):
            self._schedule_running(plan, budget)
        if not plan.preempted:
            self._schedule_waiting(plan, budget, now)
        plan.use_token_shape()
        return plan

    def _schedule_all_decodes(self, plan: StepPlan, budget: StepBudget) -> bool:
        """The common case, planned in one pass: every running request decodes one token.

        A running request holds blocks for exactly its computed tokens, so its next token needs
        a new block only when those fill their blocks; if the free blocks cover every such
        request, no one is preempted. Otherwise the request-by-request path decides.
        """
        running = self.running
        count = len(running)
        if not count or count > budget.seqs_left or count > budget.tokens_left:
            return False
        block_size = self.pool.block_size
        contexts = [r.num_computed_tokens for r in running]
        growing = [r for r, c in zip(running, contexts, strict=True) if c % block_size == 0]
        if len(growing) > self.pool.num_free:
            return False
        for request in growing:
            allocated = self.pool.allocate(request.request_id, request.num_tokens)
            assert allocated, "a running request held more KV than its computed tokens"
        plan.add_decodes(list(running), contexts)
        budget.tokens_left -= count
        budget.seqs_left -= count
        return True

    def _schedule_running(self, plan: StepPlan, budget: StepBudget) -> None:
        index = 0
        while index < len(self.running):
            request = self.running[index]
            need = request.num_uncomputed_tokens
            if not budget.fits(need):
                break
            if not self._allocate_or_preempt(request, plan):
                break  # the request preempted itself: nothing after it is left to run
            budget.take(need)
            plan.add(request, need)
            index += 1

    def _allocate_or_preempt(self, request: Request, plan: StepPlan) -> bool:
        """Reserve KV for `request`'s next tokens, preempting newest-first; False if it went."""
        while not self.pool.allocate(request.request_id, request.num_tokens):
            victim = self.running.pop()
            preempt(victim, self.pool, self.preemption, self.swap_space, plan)
            self.waiting.appendleft(victim)
            if victim is request:
                return False
        return True

    def _schedule_waiting(self, plan: StepPlan, budget: StepBudget, now: float) -> None:
        while self.waiting:
            request = self.waiting[0]
            need = request.num_uncomputed_tokens
            if not budget.fits(need):
                break
            if not self.pool.allocate(request.request_id, request.num_tokens):
                budget.stop_reason = "kv_cache_full"
                break
            self.waiting.popleft()
            swap_in(request, self.swap_space, plan)
            request.status = RequestStatus.RUNNING
            if math.isnan(request.first_scheduled_s):
                request.first_scheduled_s = now
            self.running.append(request)
            budget.take(need)
            plan.add(request, need)

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        """Steps until the running batch would need more KV blocks than are free.

        Requests left waiting stay blocked while the batch only decodes: its sequence and token
        counts do not change and its free KV only shrinks. A batch that left running requests
        unscheduled (token budget) steps normally.
        """
        if len(plan.requests) != len(self.running):
            return 1
        tokens = plan.cost_context_tokens + 1
        # Allocation is exact: each request holds the blocks of the tokens it computes now.
        held = -(-tokens // self.pool.block_size)
        extra = extra_blocks_by_step(tokens, held, self.pool.block_size, horizon)
        return int(np.searchsorted(extra, self.pool.num_free, side="right"))

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        outcome = apply_tokens(plan)
        if outcome.finished:
            for request in outcome.finished:
                self.pool.free(request.request_id)
                request.status = RequestStatus.FINISHED
            done = {id(r) for r in outcome.finished}
            self.running = [r for r in self.running if id(r) not in done]
        return outcome
