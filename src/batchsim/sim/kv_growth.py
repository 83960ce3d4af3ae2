"""KV blocks a decoding batch takes as it grows, step by step: the arithmetic under both the
step plan (a policy may count it while planning) and the fast path's stretches (stretch.py).

A request decoding one token per step needs one more block every `block_size` steps; which
step it first needs one depends only on its context modulo `block_size`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate, cycle, islice

import numpy as np


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


@dataclass(slots=True)
class ListedGrowth:
    """The cumulative KV growth of a stretch as a list (`extra_blocks_by_step`), for a batch
    whose allocation is not known to be exact; answers as `ExactGrowth` does."""

    counts: list[int]

    def at(self, step: int) -> int:
        return self.counts[step]

    def cumulative(self, num_steps: int, initial: int = 0) -> list[int]:
        return [initial + count for count in self.counts[:num_steps]]
