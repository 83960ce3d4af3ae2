"""Paged KV cache: a pool of fixed-size blocks owned by requests (vLLM's block manager, simplified).

Blocks have ids so that double frees and leaks are detectable and so that prefix sharing can be
added later without changing the interface.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class KVCacheError(RuntimeError):
    """An invariant of the block pool was violated: a bug, never a user error."""


class KVBlockPool:
    """`num_blocks` blocks of `block_size` tokens; each request holds a list of block ids."""

    __slots__ = ("_free", "_owned", "block_size", "num_blocks")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a KV block pool needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._owned: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens (ceiling division)."""
        return -(-num_tokens // self.block_size)

    def held(self, owner: int) -> int:
        blocks = self._owned.get(owner)
        return len(blocks) if blocks else 0

    def held_many(self, owners: list[int]) -> np.ndarray:
        """`held` of each owner, as an array."""
        owned = self._owned
        return np.fromiter((len(owned.get(o, ())) for o in owners), dtype=np.int64,
                           count=len(owners))

    def extra_blocks_needed(self, owner: int, total_tokens: int) -> int:
        return max(0, self.blocks_for(total_tokens) - self.held(owner))

    def allocate(self, owner: int, total_tokens: int) -> bool:
        """Make `owner` hold enough blocks for `total_tokens`; all or nothing.

        Returns False, changing nothing, when the pool lacks the blocks: the caller decides
        whether to preempt someone and retry.
        """
        blocks = self._owned.get(owner)
        if blocks is not None and total_tokens <= len(blocks) * self.block_size:
            return True  # the common case: the last block still has room
        need = self.extra_blocks_needed(owner, total_tokens)
        if need == 0:
            return True
        if need > len(self._free):
            return False
        blocks = self._owned.setdefault(owner, [])
        for _ in range(need):
            blocks.append(self._free.popleft())
        return True

    def grow_many(self, owners: list[int], total_tokens: np.ndarray) -> bool:
        """`allocate` for several owners at once, all or nothing (the fast path's bulk step)."""
        short = -(-total_tokens // self.block_size) - self.held_many(owners)
        growing = np.flatnonzero(short > 0)
        if int(short[growing].sum()) > len(self._free):
            return False
        free, owned = self._free, self._owned
        for index, count in zip(growing.tolist(), short[growing].tolist(), strict=True):
            blocks = owned.setdefault(owners[index], [])
            blocks.extend(free.popleft() for _ in range(count))
        return True

    def free(self, owner: int) -> int:
        """Return all of `owner`'s blocks to the pool; returns how many were freed."""
        blocks = self._owned.pop(owner, None)
        if blocks is None:
            raise KVCacheError(f"request {owner} frees KV blocks it does not hold")
        self._free.extend(blocks)
        return len(blocks)

    def owners(self) -> list[int]:
        return list(self._owned)

    def check_invariants(self) -> None:
        """Every block is either free or owned by exactly one request."""
        seen: set[int] = set(self._free)
        if len(seen) != len(self._free):
            raise KVCacheError("a block is on the free list twice")
        for owner, blocks in self._owned.items():
            for block in blocks:
                if block in seen:
                    raise KVCacheError(f"block {block} of request {owner} is also elsewhere")
                seen.add(block)
        if len(seen) != self.num_blocks:
            raise KVCacheError(f"{self.num_blocks - len(seen)} KV blocks leaked")


class HostSwapSpace:
    """Host memory that holds swapped-out KV blocks (counted, not identified)."""

    __slots__ = ("_held", "capacity_blocks")

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = max(0, capacity_blocks)
        self._held: dict[int, int] = {}

    @property
    def num_used(self) -> int:
        return sum(self._held.values())

    def try_store(self, owner: int, num_blocks: int) -> bool:
        if owner in self._held:
            raise KVCacheError(f"request {owner} is already swapped out")
        if self.num_used + num_blocks > self.capacity_blocks:
            return False
        self._held[owner] = num_blocks
        return True

    def release(self, owner: int) -> int:
        if owner not in self._held:
            raise KVCacheError(f"request {owner} is not swapped out")
        return self._held.pop(owner)
