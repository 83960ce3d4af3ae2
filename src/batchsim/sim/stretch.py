"""The fast path: advance a decode-only batch over many steps at once, exactly (DESIGN §11).

Between two scheduling changes a decode-only batch evolves deterministically: every sequence
gets one token per step and its context grows by one. A policy says how many steps its plan
would repeat unchanged (its `repeatable_steps`); the engine bounds that by the first sequence to
finish, times all steps in bulk, and applies all but the last here — token accounts, KV blocks,
inter-token gaps and step-log rows exactly as stepping one by one would have produced them. The
last step of a stretch goes through the policy's ordinary `on_step_done`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate, cycle, islice, pairwise

import numpy as np

from batchsim.sim.kv_cache import KVBlockPool
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


@dataclass(slots=True)  # not frozen: built at every event, and frozen init costs
class ExactGrowth:
    """`extra_blocks_by_step` of a decoding batch whose allocation is exact, as arithmetic.

    Request r holds the blocks of its `contexts[r] + 1` tokens, so its first extra block
    comes at step f = (−(c + 1) mod block_size) + 1, between 1 and `block_size`, and one more
    every `block_size` steps. The blocks newly needed per step are therefore periodic: step
    j ≥ 1 needs as many as there are requests with f ≡ j (mod block_size), and each period of
    `block_size` steps takes one block per request. So the cumulative count at any step, and
    the number of steps a given number of free blocks lasts, follow from the per-residue
    counts without building the (horizon-long) array: a stretch is planned at every event,
    and about half of them are cut by an arrival before their horizon.
    """

    block_size: int
    batch: int  # requests, i.e. blocks taken per period
    per_residue: list[int]  # [k]: requests whose first extra block comes at step k + 1
    # [k]: requests whose first extra block comes by step k; built when first needed (most
    # stretches have blocks to spare, see `steps_within`).
    _first_within: tuple[int, ...] | None = None

    @classmethod
    def of(cls, contexts: list[int], block_size: int) -> ExactGrowth:
        counts = [0] * (block_size + 1)
        for context in contexts:
            counts[-(context + 1) % block_size + 1] += 1
        return cls.from_counts(counts)

    @classmethod
    def from_counts(cls, counts: list[int]) -> ExactGrowth:
        """From `counts[k]`, the requests whose first extra block comes at step k (1 to
        block_size; `counts[0]` is 0)."""
        per_residue = counts[1:]
        return cls(len(per_residue), sum(per_residue), per_residue)

    @property
    def first_within(self) -> tuple[int, ...]:
        if self._first_within is None:
            self._first_within = tuple(accumulate(self.per_residue, initial=0))
        return self._first_within

    def at(self, step: int) -> int:
        """Blocks beyond those held that steps 0..step need in total."""
        if step == 0:
            return 0
        periods, into = divmod(step - 1, self.block_size)
        return periods * self.batch + self.first_within[into + 1]

    def steps_within(self, free: int, horizon: int) -> int:
        """Of steps 0..horizon-1, how many need no more than `free` blocks in total (the
        searchsorted of `free`, side right, in the cumulative counts)."""
        # Steps 1..horizon-1 span this many periods, each taking at most one block per
        # request: when that many are free, every step fits (the usual case).
        if -(-(horizon - 1) // self.block_size) * self.batch <= free:
            return horizon
        periods, left = divmod(free, self.batch)
        # Every step of the first `periods` periods fits; of the next, those whose count
        # stays within what is left (`first_within[0]` is step 0, which needs nothing).
        return min(horizon, periods * self.block_size + bisect_right(self.first_within, left))

    def cumulative(self, num_steps: int, initial: int = 0) -> list[int]:
        """The cumulative counts of steps 0..num_steps-1 (`exact_blocks_by_step`), each plus
        `initial`."""
        return list(accumulate(islice(cycle(self.per_residue), num_steps - 1), initial=initial))


def exact_blocks_by_step(contexts: list[int], block_size: int, num_steps: int) -> np.ndarray:
    """`extra_blocks_by_step` for a decoding batch whose allocation is exact (`ExactGrowth`)."""
    return np.array(ExactGrowth.of(contexts, block_size).cumulative(num_steps), dtype=np.int64)


@dataclass(slots=True)
class ListedGrowth:
    """The cumulative KV growth of a stretch as a list (`extra_blocks_by_step`), for a batch
    whose allocation is not known to be exact; answers as `ExactGrowth` does."""

    counts: list[int]

    def at(self, step: int) -> int:
        return self.counts[step]

    def cumulative(self, num_steps: int, initial: int = 0) -> list[int]:
        return [initial + count for count in self.counts[:num_steps]]


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
) -> None:
    """Apply `len(ends)` decode steps of `plan` that ended at `ends`, none finishing a request,
    and record the tokens of the step that follows them, the stretch's last, ending at
    `last_end` (the engine applies that step itself, without recording its tokens again).

    `kv_used` is the KV blocks in use during each of those steps (the pool's use before the
    stretch plus its `kv_growth`). Afterwards every request holds the KV blocks for the
    stretch's last step, as the policy's schedule would have allocated them. Plain lists
    throughout: a stretch applies a few dozen steps to a few dozen requests, where numpy's
    per-call cost exceeds the arithmetic.
    """
    steps = len(ends)
    requests = plan.requests
    first_end = ends[0]
    # Each request's first gap; then its token account advanced by the steps applied here.
    # Every request emits at the last step too (all decode), at `last_end`.
    ids = [request.request_id for request in requests]
    gaps = [first_end - request.last_token_s for request in requests]
    for request in requests:
        request.num_computed_tokens += steps
        request.num_generated += steps
        request.last_token_s = last_end
    grown = _grow_for_last_step(plan, ids, steps, pool)
    assert grown, "a fast-path stretch ran out of KV blocks"

    # Gaps after the first step are the same for the whole batch, the last step's included;
    # so is the first one when every request emitted its previous token at the same instant
    # (the usual case). One run, as stepping one by one extends the batch's run step by step.
    later_gaps = [end - previous for previous, end in pairwise(ends)]
    later_gaps.append(last_end - ends[-1])
    if gaps.count(gaps[0]) == len(gaps):
        gaps[1:] = later_gaps
        record.itl.add_run(ids, gaps)
    else:
        record.itl.add_singles(ids, gaps)
        record.itl.add_run(ids, later_gaps)

    starts = [first_end - durations[0]]
    starts += ends[:-1]
    record.steps.extend(
        start_s=starts, duration_s=durations, replica=replica, num_seqs=len(ids),
        new_tokens=len(ids), emitted=len(ids), kv_used=kv_used,
        waiting=num_waiting,
    )


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
