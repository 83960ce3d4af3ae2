"""What the iteration-level policies (continuous, chunked prefill) share about their batch.

Both keep running requests in admission order, both reject up front a request that could never
fit the cache, and both spend most steps with every running request decoding one token — a
step planned in one pass here, and repeated by the engine's fast path for as long as the free
KV blocks last.
"""

from __future__ import annotations

from batchsim.policies.budget import StepBudget
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.kv_growth import ExactGrowth
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan


def reject_if_never_fits(request: Request, pool: KVBlockPool) -> bool:
    """Reject (with a reason) a request whose prompt + output exceeds the whole cache.

    The simulator knows the output length; a request that could not fit in the whole cache
    even alone would be preempted forever, so it is rejected up front. Returns True if it fits.
    """
    need = pool.blocks_for(request.prompt_tokens + request.output_tokens)
    if need > pool.num_blocks:
        request.reject(f"needs {need} KV blocks for prompt+output, the cache has {pool.num_blocks}",
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
        if not _allocate_growing(growing, pool):
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
        if not _allocate_growing(growing, pool):
            return False
    plan.add_decodes(running, contexts)
    if growth is not None:
        plan.kv_growth, plan.horizon = growth, horizon
    budget.tokens_left -= tokens
    budget.seqs_left -= count
    return True


def _allocate_growing(growing: list[Request], pool: KVBlockPool) -> bool:
    """A block each for the requests whose next token starts one; False (nothing changed)
    unless all fit."""
    if len(growing) > pool.num_free:
        return False
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
    # Allocation is exact: each request holds the blocks of the tokens it computes now.
    growth = plan.kv_growth  # counted while planning when nothing waited
    if growth is None:
        growth = plan.kv_growth = ExactGrowth.of(plan.contexts, pool.block_size)
    return growth.steps_within(pool.num_free, horizon)
