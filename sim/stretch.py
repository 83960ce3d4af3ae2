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


def decode_horizon(plan: StepPlan) -> int:
    """Steps, starting with `plan`, up to and including the first in which a request finishes;
    0 unless every request has its first token and decodes exactly its one pending token.

    (A one-token prompt's prefill looks like a decode step but must set the first token.)
    """
    if plan.decodes_only:  # a plan of running decodes only needs no check
        return max(min([r.output_tokens - r.num_generated for r in plan.requests]), 0)
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


def extra_blocks_by_step(
    tokens: np.ndarray, held: np.ndarray, block_size: int, num_steps: int
) -> np.ndarray:
    """Cumulative KV blocks, beyond those held, that steps 0..num_steps-1 need in total.

    At step j request r needs blocks for `tokens[r] + j` tokens. Its first extra block is
    needed at step f = held·block_size − tokens + 1, then one more every `block_size` steps.
    So the blocks newly needed at step j are the requests whose f is j, j − block_size,
    j − 2·block_size, ...: a cumulative sum down the columns of the per-step counts of f
    folded into rows of `block_size` steps — O(steps + requests), no (steps × requests) matrix.
    """
    first = np.maximum(held * block_size - tokens + 1, 0)
    first = first[first < num_steps]
    rows = -(-num_steps // block_size)
    starting = np.bincount(first, minlength=rows * block_size)
    per_step = starting.reshape(rows, block_size).cumsum(axis=0).ravel()[:num_steps]
    return np.cumsum(per_step)


def exact_blocks_by_step(contexts: list[int], block_size: int, num_steps: int) -> np.ndarray:
    """`extra_blocks_by_step` for a decoding batch whose allocation is exact: request r holds
    the blocks of its `contexts[r] + 1` tokens, so its first extra block comes at step
    f = (−(c + 1) mod block_size) + 1, between 1 and `block_size`, and one more every
    `block_size` steps. The blocks newly needed per step are then periodic — step j ≥ 1 needs
    as many as there are requests with f ≡ j (mod block_size) — so the counts of f, repeated,
    give every step in a handful of array operations (a stretch is planned at every event).
    """
    firsts = [-(c + 1) % block_size + 1 for c in contexts]
    per_residue = np.bincount(firsts, minlength=block_size + 1)[1:]
    growth = np.zeros(num_steps, dtype=np.int64)
    periods = max(1, -(-(num_steps - 1) // block_size))
    np.cumsum(np.concatenate((per_residue,) * periods)[: num_steps - 1], out=growth[1:])
    return growth


def kv_growth(plan: StepPlan, pool: KVBlockPool, steps: int) -> np.ndarray:
    """Cumulative KV blocks the stretch's steps 0..steps-1 take beyond those held now."""
    if plan.kv_growth is not None and plan.kv_growth.size >= steps:
        return plan.kv_growth[:steps]  # counted by the policy's repeatable_steps
    held = pool.held_many([r.request_id for r in plan.requests])
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
    used_before = pool.num_used
    first_end, last = float(ends[0]), float(ends[-1])
    # One pass over the batch (tens of requests: plain Python beats numpy's per-call cost):
    # each request's first gap, the tokens its KV must hold for the stretch's last step, and
    # its token account advanced by the steps applied here.
    ids: list[int] = []
    gaps: list[float] = []
    tokens: list[int] = []
    for request, context in zip(requests, plan.contexts, strict=True):
        ids.append(request.request_id)
        gaps.append(first_end - request.last_token_s)
        tokens.append(context + steps + 1)
        request.num_computed_tokens += steps
        request.num_generated += steps
        request.last_token_s = last
    # Every request now holds blocks for its computed tokens; the stretch's last step needs one
    # more token each, and a new block only where that crosses a block boundary.
    grown = pool.grow_many(ids, tokens)
    assert grown, "a fast-path stretch ran out of KV blocks"

    # Gaps after the first step are the same for the whole batch; so is the first one when
    # every request emitted its previous token at the same instant (the usual case).
    id_array = np.array(ids, dtype=np.int64)
    later_gaps = ends[1:] - ends[:-1]
    if gaps.count(gaps[0]) == len(gaps):
        record.itl.add_run(id_array, np.concatenate((gaps[:1], later_gaps)))
    else:
        record.itl.add_singles(id_array, np.array(gaps))
        if later_gaps.size:
            record.itl.add_run(id_array, later_gaps)

    starts = np.concatenate(([first_end - float(durations[0])], ends[:-1]))
    record.steps.extend(
        start_s=starts, duration_s=durations, replica=replica, num_seqs=len(ids),
        new_tokens=len(ids), emitted=len(ids), kv_used=used_before + growth[:steps],
        waiting=num_waiting,
    )
