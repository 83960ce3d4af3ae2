"""The fast path: advance a decode-only batch over many steps at once, exactly (DESIGN §11).

Between two scheduling changes a decode-only batch evolves deterministically: every sequence
gets one token per step and its context grows by one. A policy says how many steps its plan
would repeat unchanged (its `repeatable_steps`); the engine bounds that by the first sequence to
finish, times all steps in bulk, and applies all but the last here — token accounts, KV blocks,
inter-token gaps and step-log rows exactly as stepping one by one would have produced them. The
last step of a stretch goes through the policy's ordinary `on_step_done`.
"""

from __future__ import annotations

import numpy as np

from sim.kv_cache import KVBlockPool
from sim.recorder import RunRecord
from sim.step_plan import StepPlan

# Up to this many (step, request) pairs, extra KV blocks are counted densely.
_DENSE_LIMIT = 4096


def decode_horizon(plan: StepPlan) -> int:
    """Steps, starting with `plan`, up to and including the first in which a request finishes;
    0 unless every request has its first token and decodes exactly its one pending token.

    (A one-token prompt's prefill looks like a decode step but must set the first token.)
    """
    horizon = -1
    check = not plan.decodes_only  # a plan of running decodes only needs no check
    for request, n, computed in zip(plan.requests, plan.num_new_tokens, plan.contexts,
                                    strict=True):
        generated = request.num_generated
        if check and (n != 1 or generated == 0
                      or computed + 1 != request.prompt_tokens + generated):
            return 0
        left = request.output_tokens - generated
        if horizon < 0 or left < horizon:
            horizon = left
    return max(horizon, 0)


def extra_blocks_by_step(
    tokens: np.ndarray, held: np.ndarray, block_size: int, num_steps: int
) -> np.ndarray:
    """Cumulative KV blocks, beyond those held, that steps 0..num_steps-1 need in total.

    At step j request r needs blocks for `tokens[r] + j` tokens. Its first extra block is
    needed at step f = held·block_size − tokens + 1, then one more every `block_size` steps;
    the events are counted per step and summed, without a (steps × requests) matrix.
    """
    first = np.maximum(held * block_size - tokens + 1, 0)
    if num_steps * tokens.size <= _DENSE_LIMIT:
        # Small stretches: count each request's extra blocks at every step directly.
        steps = np.arange(num_steps)[:, None]
        extra = np.where(steps >= first, (steps - first) // block_size + 1, 0)
        return extra.sum(axis=1)
    counts = np.maximum(0, -(-(num_steps - first) // block_size))
    total = int(counts.sum())
    per_step = np.zeros(num_steps, dtype=np.int64)
    if total:
        starts = np.repeat(first, counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        per_step = np.bincount(starts + offsets * block_size, minlength=num_steps)
    return np.cumsum(per_step)


def kv_growth(plan: StepPlan, pool: KVBlockPool, steps: int) -> np.ndarray:
    """Cumulative KV blocks the stretch's steps 0..steps-1 take beyond those held now."""
    held = np.fromiter((pool.held(r.request_id) for r in plan.requests), dtype=np.int64,
                       count=len(plan.requests))
    tokens = np.array(plan.contexts, dtype=np.int64) + 1
    return extra_blocks_by_step(tokens, held, pool.block_size, steps)


def advance_decode_steps(
    plan: StepPlan, ends: np.ndarray, durations: np.ndarray, growth: np.ndarray, *,
    pool: KVBlockPool, record: RunRecord, replica: int, num_waiting: int,
) -> None:
    """Apply `len(ends)` decode steps of `plan` that ended at `ends`, none finishing a request.

    `growth` is the stretch's `kv_growth`. Afterwards every request holds the KV blocks for the
    step that follows (the stretch's last), as the policy's schedule would have allocated them.
    """
    steps = ends.size
    requests = plan.requests
    n = len(requests)
    ids = np.fromiter((r.request_id for r in requests), dtype=np.int64, count=n)
    last_token = np.fromiter((r.last_token_s for r in requests), dtype=np.float64, count=n)
    used_before = pool.num_used

    last = float(ends[-1])
    for request in requests:
        request.num_computed_tokens += steps
        request.num_generated += steps
        request.last_token_s = last
        # Holds blocks for its computed tokens; a new one only at a block boundary.
        if pool.held(request.request_id) * pool.block_size < request.num_tokens:
            allocated = pool.allocate(request.request_id, request.num_tokens)
            assert allocated, "a fast-path stretch ran out of KV blocks"

    # Gaps after the first step are the same for the whole batch; so is the first one when
    # every request emitted its previous token at the same instant (the usual case).
    first = ends[0] - last_token
    if (first == first[0]).all():
        record.itl_runs.append((ids, np.concatenate((first[:1], np.diff(ends)))))
    else:
        record.itl_s.frombytes(first.tobytes())
        record.itl_request.frombytes(ids.tobytes())
        if steps > 1:
            record.itl_runs.append((ids, np.diff(ends)))

    starts = np.concatenate(([ends[0] - durations[0]], ends[:-1]))
    record.steps.extend(
        start_s=starts, duration_s=durations, replica=replica, num_seqs=n, new_tokens=n,
        emitted=n, kv_used=used_before + growth[:steps], waiting=num_waiting,
    )
