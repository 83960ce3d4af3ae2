"""Chunked prefill (Sarathi-Serve; vLLM v1's scheduler), docs/design.md §4.

Each step has a token budget. Decodes go first: running requests that need one token, in
admission order, each reserving the KV for it or preempting the most recently admitted running
request until it can. Prefill chunks fill what is left: running requests whose prompt is only
partly computed continue first (admission order), then — only if nothing was preempted this
step — waiting requests in the waiting queue's order (FCFS by default, policies/ordering.py).
Each gets `min(uncomputed tokens, budget left, long_prefill_token_threshold)`, so a long prompt
spreads over several steps and no decode waits behind more than one budget of prefill. KV is
allocated for the tokens a step computes, so a prompt longer than the budget is fine; only one
that could never fit the cache is rejected.

On a cache too small for its prompts this admits what continuous batching would not: a waiting
request needs blocks for its first chunk only, so a long prompt may enter beside decodes that
leave no room for its next chunk, which then preempts it (it is the newest). vLLM v1 does the
same (0.12.0: vllm/v1/core/sched/scheduler.py `Scheduler.schedule` caps a waiting request's
tokens at the budget left before `KVCacheManager.allocate_slots`; there is no watermark, and a
running request that cannot grow preempts the last one in `running`, itself included). What
happens next depends on prefix caching, which vLLM enables by default. Without it the request
is readmitted with one chunk at the next step that preempts nobody and preempts itself again,
for as long as the running requests hold the cache: vLLM with `--no-enable-prefix-caching`
thrashes the same way, and so does this policy. With it the blocks the request computed stay
cached (`policies/preemption.py` `own_block_keys`), and readmission must fit them again as
well as its next chunk, so it waits until they fit and then recomputes only its partly filled
last block.

With `mixed_prefill=False` (SGLang's default scheduler, without `--enable-mixed-chunk`) a step
never mixes the two: whenever prefill work can be scheduled — a running request whose prompt is
only partly computed, or a waiting request that can be admitted — the step holds only prefill
chunks, in the same order and under the same budget, and the running decodes wait for the next
step; only a step with no prefill to schedule decodes every running request. Admission is
prefill work even for a request swapped out mid-decode: it returns in a prefill step.
"""

from __future__ import annotations

from batchsim.policies.admission import AdmissionControl, KVReserve
from batchsim.policies.budget import StepBudget
from batchsim.policies.iteration_level import (
    IterationLevelQueues,
    allocate_growing,
    schedule_all_decodes,
    unschedule,
)
from batchsim.policies.ordering import WaitingQueue
from batchsim.policies.preemption import PreemptionMode, VictimRule, allocate_or_preempt
from batchsim.policies.speculative import Speculation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepOutcome, StepPlan


class ChunkedPrefill(IterationLevelQueues):
    def __init__(
        self,
        *,
        pool: KVBlockPool,
        token_budget: int,
        max_num_seqs: int,
        long_prefill_token_threshold: int | None = None,
        preemption: PreemptionMode = "recompute",
        swap_space: HostSwapSpace | None = None,
        admission: AdmissionControl | None = None,
        reserve: KVReserve | None = None,
        ordering: WaitingQueue | None = None,
        speculation: Speculation | None = None,
        mixed_prefill: bool = True,
        victim_rule: VictimRule = "newest",
    ) -> None:
        threshold = long_prefill_token_threshold
        if token_budget < 1 or max_num_seqs < 1 or (threshold is not None and threshold < 1):
            raise ValueError("chunked prefill needs a token budget, max_num_seqs and a prefill "
                             "threshold (if any) of at least 1")
        super().__init__(pool=pool, max_num_seqs=max_num_seqs, preemption=preemption,
                         swap_space=swap_space, admission=admission, reserve=reserve,
                         ordering=ordering, speculation=speculation, victim_rule=victim_rule)
        self.token_budget = token_budget
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.mixed_prefill = mixed_prefill
        # True when the last step scheduled every running request and each emitted a token:
        # then each has its first token and one pending token, the precondition of planning
        # the next step in one pass (a request whose last prompt chunk is one token must not
        # pass for a decode: it has no first token yet).
        self._all_decoding = True

    def add_request(self, request: Request, now: float) -> bool:
        return self._enqueue(request, now)

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        if not self.mixed_prefill:
            self._schedule_unmixed(plan, now)
        else:
            budget = StepBudget(self.token_budget, self.max_num_seqs)
            if not (self._all_decoding
                    and schedule_all_decodes(self.running, self.pool, plan, budget,
                                             self.lookahead,
                                             stretch_ahead=self._stretch_ahead())):
                self._schedule_running(plan, budget)
            if self.waiting and not plan.preempted:
                self._schedule_waiting(plan, budget, now)
        self._plan_past_self_preemption(plan, self._replan_running)
        return self._shape(plan)

    def _replan_running(self, plan: StepPlan) -> None:
        """The running requests alone, with a fresh budget: prefill chunks first and decodes
        only if none when unmixed, both in one step when mixing."""
        if self.mixed_prefill:
            self._schedule_running(plan, StepBudget(self.token_budget, self.max_num_seqs))
            return
        for phase in (False, True):
            self._schedule_running(plan, StepBudget(self.token_budget, self.max_num_seqs),
                                   phases=(phase,))
            if plan.requests:
                return

    def _schedule_unmixed(self, plan: StepPlan, now: float) -> None:
        """A prefill-only step if any prefill can be scheduled, else a decode-only one.

        The prefill pass is the mixed step's without its decodes, with the whole budget: the
        partial prompts (allocate-or-preempt), then admission unless that preempted. It takes
        nothing when it schedules nothing — an admission that fails changes no state — so a
        batch that was all decoding still is, and is planned in one pass. A decode step never
        admits. Unmixed steps are never stretched (`repeatable_steps`).
        """
        budget = StepBudget(self.token_budget, self.max_num_seqs)
        self._schedule_running(plan, budget, phases=(False,))
        if self.waiting and not plan.preempted:
            self._schedule_waiting(plan, budget, now)
        if plan.requests:
            return  # the decodes resume once no prefill is left
        budget = StepBudget(self.token_budget, self.max_num_seqs)
        if not (self._all_decoding
                and schedule_all_decodes(self.running, self.pool, plan, budget, self.lookahead,
                                         stretch_ahead=self._stretch_ahead())):
            self._schedule_running(plan, budget, phases=(True,))

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        """The shared answer when mixing; unmixed, one step at a time. An unmixed step plans
        prefill first, so a request that arrives exactly at a step's end decides that step, and
        which of the two events comes first stepping one by one depends on the order SimPy
        scheduled them; a stretch cannot reproduce it (a hypothesis example with two replicas
        whose steps tie found the difference)."""
        if not self.mixed_prefill:
            return 1
        return super().repeatable_steps(plan, horizon)

    def _chunk(self, request: Request, budget: StepBudget, cached_tokens: int = 0) -> int:
        """Tokens `request` may compute this step: the rest of its prompt (or its one pending
        token) beyond `cached_tokens` found in the prefix cache, capped by the budget left and
        by the per-request prefill threshold."""
        tokens = min(request.num_uncomputed_tokens - cached_tokens, budget.tokens_left)
        if self.long_prefill_token_threshold is not None:
            tokens = min(tokens, self.long_prefill_token_threshold)
        return tokens

    def _schedule_running(self, plan: StepPlan, budget: StepBudget,
                          phases: tuple[bool, ...] = (True, False)) -> None:
        """Decodes first, then the chunks of running requests still prefilling (`phases`:
        which of the two, in order; unmixed steps take one).

        The choices are added to the plan only at the end: a prefill chunk that preempts may
        evict a decode already chosen this step (it is newer), which then gives back its token.
        """
        chosen: dict[Request, tuple[int, int]] = {}  # tokens, and the budget they took
        for decodes in phases:
            if not (decodes and self._take_decodes_at_once(chosen, budget)):
                self._take_running(chosen, budget, plan, decodes=decodes)
        plan.add_chosen(chosen)

    def _take_running(self, chosen: dict[Request, tuple[int, int]], budget: StepBudget,
                      plan: StepPlan, *, decodes: bool) -> None:
        index = 0
        while index < len(self.running):
            request = self.running[index]
            index += 1
            # A prompt's one-token last chunk goes with the decodes when mixing; unmixed it is
            # prefill (it sets the first token) and must not share a step with them.
            if (request.num_uncomputed_tokens == 1
                    and (self.mixed_prefill or request.num_generated > 0)) != decodes:
                continue
            tokens = self._chunk(request, budget)
            charge = tokens + self._lookahead_of(request, tokens)
            if tokens == 0 or not budget.fits(charge):
                break
            first_victim = len(plan.preempted)
            if not self._allocate_or_preempt(request, charge, chosen, budget, plan):
                break  # the request preempted itself: the step stops here, as in vLLM
            if len(plan.preempted) > first_victim:
                index = self.running.index(request) + 1  # a priority victim may sit before it
            budget.take(charge)
            chosen[request] = (tokens, charge)

    def _take_decodes_at_once(self, chosen: dict[Request, tuple[int, int]],
                              budget: StepBudget) -> bool:
        """The decode phase of a mixed step in one pass, when nothing can cut it short: the
        budget holds every decode and the free blocks cover those whose next token starts a
        block, so the request-by-request loop would take each one token in admission order and
        preempt no one. The same choices and allocations, without the loop's per-request checks
        (most steps of a loaded replica mix decodes with a prompt's chunk). False, with nothing
        taken, when it cannot tell: speculation, a contiguous pool, or too little room."""
        if self.lookahead or not self.mixed_prefill or not self.pool.exact_growth:
            return False
        block_size = self.pool.block_size
        decodes: list[Request] = []
        growing: list[Request] = []  # whose next token starts a block
        for request in self.running:
            computed = request.num_computed_tokens
            if request.prompt_tokens + request.num_generated - computed == 1:
                decodes.append(request)
                if not computed % block_size:
                    growing.append(request)
        count = len(decodes)
        if (count > budget.seqs_left or count > budget.tokens_left
                or not allocate_growing(growing, self.pool)):
            return False
        budget.tokens_left -= count
        budget.seqs_left -= count
        for request in decodes:
            chosen[request] = (1, 1)
        return True

    def _allocate_or_preempt(self, request: Request, tokens: int,
                             chosen: dict[Request, tuple[int, int]], budget: StepBudget,
                             plan: StepPlan) -> bool:
        """Reserve KV for `request`'s next `tokens`, preempting by the arm's victim rule; False
        if it went.

        A victim already chosen this step is unscheduled and its budget returned (as vLLM v1
        does when a preemption evicts a request it had scheduled).
        """
        first_victim = len(plan.preempted)
        kept = allocate_or_preempt(
            request, request.num_computed_tokens + tokens, running=self.running,
            waiting=self.waiting, pool=self.pool, mode=self.preemption,
            swap_space=self.swap_space, plan=plan, victim_rule=self.victim_rule,
        )
        unschedule(plan.preempted[first_victim:], chosen, budget)
        return kept

    def _schedule_waiting(self, plan: StepPlan, budget: StepBudget, now: float) -> None:
        """Admission in queue order: the head blocks those behind it, as in vLLM."""
        gate = self._reserve_gate()
        while self.waiting:
            if len(self.running) >= self.max_num_seqs:
                budget.stop_reason = "max_num_seqs"
                break
            request = self.waiting.head()
            cached = self._cached_prefix(request)
            tokens = self._chunk(request, budget, cached * self.pool.block_size)
            if (tokens == 0 or not budget.fits(tokens)
                    or not self._try_admit(request, tokens, plan, budget, gate, now, cached)):
                break

    def _eviction_may_unblock(self) -> bool:
        """A chunk needs fresh blocks only for its own tokens, so the cached blocks it would
        reuse and pin cost it free blocks: evicting one of those can let it in."""
        if not self.pool.prefix_caching or not self.waiting:
            return False
        head = self.waiting.head()
        limit = self._cached_prefix(head)
        return self.pool.evictable_prefix_blocks(head.prefix_keys, limit) > 0

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        all_running = len(plan.requests) == len(self.running)
        outcome = self._apply_step(plan, now)
        self._all_decoding = all_running and len(outcome.emitted) == len(plan.requests)
        return outcome
