"""The fast path: advance a decode-only batch over many steps at once, exactly (docs/design.md §11).

Between two scheduling changes a decode-only batch evolves deterministically: every sequence
gets one token per step and its context grows by one. A policy says how many steps its plan
would repeat unchanged (its `repeatable_steps`); the engine bounds that by the first sequence to
finish, times all steps in bulk, and applies all but the last here — token accounts, KV blocks,
inter-token gaps and step-log rows exactly as stepping one by one would have produced them. The
last step of a stretch goes through the policy's ordinary `on_step_done`.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.kv_growth import ExactGrowth, ListedGrowth, extra_blocks_by_step
from batchsim.sim.recorder import RunRecord
from batchsim.sim.step_plan import StepPlan


def decode_horizon(plan: StepPlan) -> int:
    """Steps, starting with `plan`, up to and including the first in which a request finishes;
    0 unless every request has its first token and decodes exactly its one pending token.

    (A one-token prompt's prefill looks like a decode step but must set the first token.)
    """
    if plan.decodes_only:  # a plan of running decodes only needs no check
        if plan.horizon is not None:  # counted by the policy while planning
            return plan.horizon
        return max(min([r.output_tokens - r.num_generated for r in plan.requests]), 0)
    if plan.num_new_tokens.count(1) != len(plan.num_new_tokens):
        return 0  # a prefill (usually the last request): found without walking the batch
    horizon = -1
    for request, n, computed in zip(plan.requests, plan.num_new_tokens, plan.contexts,
                                    strict=True):
        generated = request.num_generated
        if n != 1 or generated == 0 or computed + 1 != request.prompt_tokens + generated:
            return 0
        left = request.output_tokens - generated
        if horizon < 0 or left < horizon:
            horizon = left
    return max(horizon, 0)


def kv_growth(plan: StepPlan, pool: KVBlockPool, steps: int) -> ExactGrowth | ListedGrowth:
    """Cumulative KV blocks the stretch's steps 0..steps-1 take beyond those held now."""
    if plan.kv_growth is not None:
        return plan.kv_growth  # counted by the policy's repeatable_steps; no list built
    held = pool.held_many([r.request_id for r in plan.requests])
    tokens = np.array(plan.contexts, dtype=np.int64) + 1
    return ListedGrowth(extra_blocks_by_step(tokens, held, pool.block_size, steps).tolist())


def advance_decode_steps(
    plan: StepPlan, ends: list[float], durations: list[float], kv_used: list[int], *,
    pool: KVBlockPool, record: RunRecord, replica: int, num_waiting: int, last_end: float,
    shown: list[float] | None = None,
) -> None:
    """Apply `len(ends)` decode steps of `plan` that ended at `ends`, none finishing a request,
    and record the tokens of the step that follows them, the stretch's last, ending at
    `last_end` (the engine applies that step itself, without recording its tokens again).

    `kv_used` is the KV blocks in use during each of those steps (the pool's use before the
    stretch plus its `kv_growth`). Afterwards every request holds the KV blocks for the
    stretch's last step, as the policy's schedule would have allocated them. Plain lists
    throughout: a stretch applies a few dozen steps to a few dozen requests, where numpy's
    per-call cost exceeds the arithmetic.

    `shown`: when the clients see each step's tokens, the last step's included, if not when
    the steps end (a streaming server behind, sim/token_stream.py).
    """
    steps = len(ends)
    requests = plan.requests
    token_ends, token_last = (ends, last_end) if shown is None else (shown[:-1], shown[-1])
    first_end = token_ends[0]
    # Each request's first gap; then its token account advanced by the steps applied here.
    # Every request emits at the last step too (all decode), at `last_end`.
    ids = [request.request_id for request in requests]
    gaps = [first_end - request.last_token_s for request in requests]
    for request in requests:
        request.num_computed_tokens += steps
        request.num_generated += steps
        request.last_token_s = token_last
    grown = _grow_for_last_step(plan, ids, steps, pool)
    assert grown, "a fast-path stretch ran out of KV blocks"

    # Gaps after the first step are the same for the whole batch, the last step's included;
    # so is the first one when every request emitted its previous token at the same instant
    # (the usual case). One run, as stepping one by one extends the batch's run step by step.
    later_gaps = [end - previous for previous, end in pairwise(token_ends)]
    later_gaps.append(token_last - token_ends[-1])
    if gaps.count(gaps[0]) == len(gaps):
        gaps[1:] = later_gaps
        record.itl.add_run(ids, gaps)
    else:
        record.itl.add_singles(ids, gaps)
        record.itl.add_run(ids, later_gaps)

    starts = [ends[0] - durations[0]]
    starts += ends[:-1]
    record.steps.extend(
        start_s=starts, duration_s=durations, replica=replica, num_seqs=len(ids),
        new_tokens=len(ids), emitted=len(ids), kv_used=kv_used,
        waiting=num_waiting,
    )
    if record.step_trace is not None:
        record.step_trace.stretch(starts, durations, replica, len(ids))


def _grow_for_last_step(plan: StepPlan, ids: list[int], steps: int, pool: KVBlockPool) -> bool:
    """Make every request of `plan` hold the KV blocks of the stretch's last step, `steps`
    steps after its first: context + steps + 1 tokens.

    With exact allocation (the policy counted the stretch's growth, `plan.kv_growth`) a
    request holds the blocks of its first step's context + 1 tokens, so it lacks one block
    per block boundary that context + steps crosses: arithmetic, without asking the pool
    what each holds. Otherwise the pool is asked about every request."""
    contexts = plan.contexts
    if plan.kv_growth is None:
        return pool.grow_many(ids, [context + steps + 1 for context in contexts])
    block_size = pool.block_size
    if steps < block_size:  # one block each, for those whose last block fills up
        threshold = block_size - steps
        return pool.hand_out([request_id for request_id, context
                              in zip(ids, contexts, strict=True)
                              if context % block_size >= threshold])
    return pool.hand_out(ids, [(context + steps) // block_size - context // block_size
                               for context in contexts])
