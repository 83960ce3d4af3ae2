"""What the iteration-level policies (continuous, chunked prefill) share.

`IterationLevelQueues` is their base: a waiting queue, the running batch in admission order
(newest-first preemption takes from its end), admission control on arrival, and the release of
finished requests; each policy adds its own `schedule`. Both reject up front a request that
could never fit the cache, and both spend most steps with every running request decoding one
token — a step planned in one pass here, and repeated by the engine's fast path for as long as
the free KV blocks last.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from batchsim.policies.admission import AdmissionControl, KVReserve, ReserveGate, steps_applied
from batchsim.policies.budget import StepBudget
from batchsim.policies.ordering import FcfsQueue, WaitingQueue
from batchsim.policies.preemption import PreemptionMode, VictimRule, swap_in
from batchsim.policies.speculative import (
    Speculation,
    accept_proposals,
    is_decode,
    shape_speculative_step,
)
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.kv_growth import ExactGrowth
from batchsim.sim.kv_tiered_pool import TieredKVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepOutcome, StepPlan, apply_tokens


def reject_if_never_fits(request: Request, pool: KVBlockPool) -> bool:
    """Reject (with a reason) a request whose prompt + output exceeds the whole cache (or,
    in a contiguous pool, whose reserved region does).

    The simulator knows the output length; a request that could not fit in the whole cache
    even alone would be preempted forever, so it is rejected up front. Returns True if it fits.
    """
    tokens = pool.lifetime_tokens(request)
    need = pool.blocks_for(tokens)
    if need > pool.num_blocks:
        what = ("prompt+output" if tokens == request.prompt_tokens + request.output_tokens
                else f"its reserved region of {tokens} tokens")
        request.reject(f"needs {need} KV blocks for {what}, the cache has {pool.num_blocks}",
                       kind="kv_cache_too_small")
        return False
    return True


def schedule_all_decodes(
    running: list[Request], pool: KVBlockPool, plan: StepPlan, budget: StepBudget,
    lookahead: int = 0, *, stretch_ahead: bool = False,
) -> bool:
    """The common case, planned in one pass: every running request decodes one token.

    The caller guarantees that every running request has its first token and exactly one
    uncomputed token. Such a request holds blocks for exactly its computed tokens, so its next
    token needs a new block only when those fill their blocks; if the free blocks cover every
    such request, no one is preempted. Otherwise (False, nothing planned) the caller's
    request-by-request path decides. With speculative decoding each request also holds
    `lookahead` slots and spends that many more tokens of the budget.

    `stretch_ahead`: the plan will be all there is to this step (no request is waiting to be
    admitted), so the engine will ask how long it repeats; the same pass counts what that
    needs — the steps until the first request finishes, and the batch's KV growth.
    """
    count = len(running)
    tokens = count * (1 + lookahead)
    if not count or count > budget.seqs_left or tokens > budget.tokens_left:
        return False
    contexts: list[int]
    growth: ExactGrowth | None = None
    horizon = 0
    if lookahead:
        contexts = [r.num_computed_tokens for r in running]
        wanted = [r.num_tokens + lookahead for r in running]
        if not pool.grow_many([r.request_id for r in running], wanted):
            return False
    elif stretch_ahead:
        contexts, growing, growth, horizon = _decodes_and_growth(running, pool.block_size)
        if not allocate_growing(growing, pool):
            return False
    else:
        # One pass: each request's computed tokens, and those whose blocks are full.
        block_size = pool.block_size
        contexts = []
        growing = []
        for request in running:
            context = request.num_computed_tokens
            contexts.append(context)
            if not context % block_size:
                growing.append(request)
        if not allocate_growing(growing, pool):
            return False
    plan.add_decodes(running, contexts)
    if growth is not None:
        plan.kv_growth, plan.horizon = growth, horizon
    budget.tokens_left -= tokens
    budget.seqs_left -= count
    return True


def unschedule(victims: list[Request], chosen: dict[Request, tuple[int, int]],
               budget: StepBudget) -> None:
    """Victims a preemption took that were already chosen this step leave the step and give
    back the budget they took (`chosen`: each choice's tokens and budget charge)."""
    for victim in victims:
        if victim in chosen:
            budget.tokens_left += chosen.pop(victim)[1]
            budget.seqs_left += 1


def allocate_growing(growing: list[Request], pool: KVBlockPool) -> bool:
    """A block each for the requests whose next token starts one; False (nothing changed)
    unless all fit."""
    if pool.exact_growth and len(growing) > pool.num_free:
        return False  # (a contiguous region already holds every running request's block)
    for request in growing:
        allocated = pool.allocate(request.request_id, request.num_tokens)
        assert allocated, "a running request held more KV than its computed tokens"
    return True


def _decodes_and_growth(
    running: list[Request], block_size: int,
) -> tuple[list[int], list[Request], ExactGrowth, int]:
    """`schedule_all_decodes`' pass, counting also each request's steps left (the batch's
    horizon is the fewest) and the residue of its context (`ExactGrowth.of`'s counts)."""
    contexts: list[int] = []
    growing: list[Request] = []
    counts = [0] * (block_size + 1)
    horizon = running[0].output_tokens
    for request in running:
        context = request.num_computed_tokens
        contexts.append(context)
        residue = context % block_size
        if not residue:
            growing.append(request)
        counts[block_size - residue] += 1  # its first extra block comes at step bs − residue
        left = request.output_tokens - request.num_generated
        if left < horizon:
            horizon = left
    return contexts, growing, ExactGrowth.from_counts(counts), max(horizon, 0)


def decode_repeat_steps(plan: StepPlan, num_running: int, pool: KVBlockPool,
                        horizon: int) -> int:
    """Steps, of the next `horizon`, until the decoding batch needs more KV blocks than are free.

    Only for a decode-only plan (the engine asks about no other) holding the policy's running
    requests: a batch that left a running request unscheduled (token or sequence budget, or a
    request still prefilling) steps normally. Requests left waiting stay blocked while the
    batch only decodes — its sequence and token counts do not change and free KV only shrinks —
    which the caller must check holds for its own admission rule.
    """
    if len(plan.requests) != num_running:
        return 1
    if not pool.exact_growth:  # contiguous regions hold every decode: nothing to run out of
        return horizon
    # Allocation is exact: each request holds the blocks of the tokens it computes now.
    growth = plan.kv_growth  # counted while planning when nothing waited
    if growth is None:
        growth = plan.kv_growth = ExactGrowth.of(plan.contexts, pool.block_size)
    return growth.steps_within(pool.num_free, horizon)


class IterationLevelQueues:
    def __init__(
        self, *, pool: KVBlockPool, max_num_seqs: int, preemption: PreemptionMode,
        swap_space: HostSwapSpace | None, admission: AdmissionControl | None,
        reserve: KVReserve | None, ordering: WaitingQueue | None = None,
        speculation: Speculation | None = None, victim_rule: VictimRule = "newest",
    ) -> None:
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.preemption: PreemptionMode = preemption
        self.victim_rule: VictimRule = victim_rule  # which running request a full cache evicts
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

    def _plan_past_self_preemption(self, plan: StepPlan,
                                   replan: Callable[[StepPlan], None]) -> None:
        """Under the priority victim rule the request being scheduled can be the lowest
        priority and preempt itself while requests admitted after it still run: vLLM's step
        then schedules nothing (its running loop stops at a self-preemption) and its next
        step, at once, runs them. An empty plan would leave this replica idle, so plan that next
        step now into `plan`, running requests only (a step that preempted admits nobody)."""
        if self.victim_rule != "priority":
            return  # newest-first preempts itself only when alone, and alone it always fits
        while plan.is_empty and plan.preempted and self.running:
            before = len(plan.preempted)
            replan(plan)
            if plan.is_empty and len(plan.preempted) == before:
                return

    def _stretch_ahead(self) -> bool:
        """Plan a decode-only step with what the engine's stretch asks, counted in the same
        pass: when the engine stretches and no request waits (the plan is then all decodes)."""
        return self._engine_stretches and not self.waiting and self.pool.exact_growth

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
        self.pool.register(request)
        self.waiting.push(request)
        return True

    def kv_holders(self) -> list[Request]:
        """The requests holding KV now (sim/kv_fragmentation.py): the running batch."""
        return self.running

    def waiting_head(self) -> Request | None:
        """The request admitted next, if any (sim/kv_fragmentation.py)."""
        return self.waiting.head() if len(self.waiting) else None

    def _reserve_gate(self) -> ReserveGate | None:
        """The conservative-admission check for this step's admissions, if configured."""
        if self.reserve is None or not self.waiting:
            return None
        return ReserveGate(self.reserve, self.running, self.pool)

    def _cached_prefix(self, request: Request) -> int:
        """Leading blocks of the waiting `request` it would find in the prefix cache if admitted
        now (0 without prefix caching, or for a request that kept its KV by swapping): of its
        prompt, or after a recompute preemption of every token it knows. At least one token is
        always left to compute: it produces the next token (vLLM v1 caps a hit at
        `num_tokens - 1`: `KVCacheManager.get_computed_blocks`, 0.12.0)."""
        if not request.prefix_keys or request.num_computed_tokens or request.swapped_out:
            return 0
        limit = (request.num_tokens - 1) // self.pool.block_size
        return self.pool.prefix_hit_blocks(request.prefix_keys, limit)

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
        if isinstance(self.pool, TieredKVBlockPool):
            self._take_tier_load(request, self.pool, plan)
        self.waiting.pop_head()
        swap_in(request, self.swap_space, plan)
        request.status = RequestStatus.RUNNING
        if math.isnan(request.first_scheduled_s):
            request.first_scheduled_s = now
        self.running.append(request)
        budget.take(tokens)
        plan.add(request, tokens)
        return True

    @staticmethod
    def _take_tier_load(request: Request, pool: TieredKVBlockPool, plan: StepPlan) -> None:
        """The step waits for the admitted request's prefix blocks from lower tiers; a first
        admission records how many tokens each tier gave it."""
        load, hits = pool.take_load()
        plan.load_seconds += load
        plan.load_layers = pool.layers
        if math.isnan(request.first_scheduled_s):
            request.tier_cached_tokens = tuple(blocks * pool.block_size for blocks in hits)

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
        else:  # readmitted after a recompute preemption: the cached part is not computed again
            request.recomputed_tokens -= min(cached_tokens, request.dropped_tokens)
        request.dropped_tokens = 0
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
