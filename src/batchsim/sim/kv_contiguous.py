"""Contiguous KV reservation, as servers did before paging (docs/design.md §2, KV cache).

Each sequence, when admitted, gets one region of consecutive blocks sized for its whole life —
prompt plus the most output it may produce — placed first-fit in an address space of the
pool's `num_blocks` blocks, and keeps it until it leaves. Nothing is ever moved (no
compaction), so free memory splits into holes between live regions: a sequence is refused
when no single hole holds its region even though the free blocks together would
(external fragmentation), and the part of a region its sequence has not written yet is
reserved but unused (internal fragmentation). A block is the allocation granule;
`block_size: 1` makes regions token-exact.

The pool answers the paged pool's questions (`held` is a region's length, `num_used` the
blocks reserved), so the policies run on it unchanged; a running sequence's later
allocations always fall inside its region, hence never preempt anyone.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np

from batchsim.sim.kv_cache import KVBlockPool, KVCacheError
from batchsim.sim.request import Request

ContiguousReserve = Literal["max_output", "max_model_len"]


class ContiguousKVPool(KVBlockPool):
    """Regions of consecutive blocks, one per sequence, placed first-fit."""

    __slots__ = ("_length_at", "_refused", "_region", "_reserve_tokens", "_reserved", "_starts",
                 "max_model_len", "reserve")
    # A decode never takes a block: its region already holds it (policies and the fast path
    # must not assume paged growth, see policies/iteration_level.py).
    exact_growth: ClassVar[bool] = False
    allocation: ClassVar[str] = "contiguous"
    has_holes: ClassVar[bool] = True

    def __init__(self, num_blocks: int, block_size: int, *, reserve: ContiguousReserve,
                 max_model_len: int) -> None:
        super().__init__(num_blocks, block_size)
        self.reserve: ContiguousReserve = reserve
        self.max_model_len = max_model_len
        self._region: dict[int, tuple[int, int]] = {}  # owner -> (first block, length)
        self._starts: list[int] = []  # first blocks of the live regions, ascending
        self._length_at: dict[int, int] = {}  # first block -> length, of each live region
        self._reserved = 0  # blocks in live regions
        self._reserve_tokens: dict[int, int] = {}  # owner -> its region's size, in tokens
        # Requests refused at least once although the free blocks together would have held
        # their region: a set, so the count does not depend on how often admission retried.
        self._refused: set[int] = set()

    def lifetime_tokens(self, request: Request) -> int:
        """What a region reserves: prompt + output (the workload's output length stands for
        the client's `max_tokens`, as `vllm bench serve` sends it), or `max_model_len`."""
        if self.reserve == "max_model_len":
            return self.max_model_len
        return request.prompt_tokens + request.output_tokens

    def register(self, request: Request) -> None:
        self._reserve_tokens[request.request_id] = self.lifetime_tokens(request)

    @property
    def num_free(self) -> int:
        return self.num_blocks - self.num_used

    @property
    def num_used(self) -> int:
        return self._reserved

    @property
    def num_free_uncached(self) -> int:
        return self.num_free

    def held(self, owner: int) -> int:
        region = self._region.get(owner)
        return region[1] if region else 0

    def held_many(self, owners: list[int]) -> np.ndarray:
        return np.fromiter((self.held(o) for o in owners), dtype=np.int64, count=len(owners))

    def holes(self) -> list[int]:
        """Lengths of the free holes between live regions, in address order."""
        lengths: list[int] = []
        end = 0
        for start in self._starts:
            if start > end:
                lengths.append(start - end)
            end = start + self._length_at[start]
        if end < self.num_blocks:
            lengths.append(self.num_blocks - end)
        return lengths

    def refused_by_fragmentation(self) -> int:
        return len(self._refused)

    def unusable_free_blocks(self, request: Request | None) -> int:
        """Free blocks in holes too small for `request`'s region (external fragmentation as
        the next admission meets it); none when no request waits."""
        if request is None:
            return 0
        need = self.blocks_for(self._reserve_tokens.get(request.request_id,
                                                        self.lifetime_tokens(request)))
        return sum(hole for hole in self.holes() if hole < need)

    def _first_fit(self, length: int) -> int | None:
        """The first block of the lowest hole of at least `length` blocks, if any."""
        end = 0
        for first in self._starts:
            if first - end >= length:
                return end
            end = first + self._length_at[first]
        return end if self.num_blocks - end >= length else None

    def allocate(self, owner: int, total_tokens: int) -> bool:
        """A sequence with a region fits while `total_tokens` stays inside it; a new one gets
        its whole region now, first-fit, or nothing."""
        region = self._region.get(owner)
        if region is not None:
            return total_tokens <= region[1] * self.block_size
        tokens = max(self._reserve_tokens.get(owner, 0), total_tokens)
        length = self.blocks_for(tokens)
        start = self._first_fit(length)
        if start is None:
            if length <= self.num_free:
                self._refused.add(owner)
            return False
        self._region[owner] = (start, length)
        self._length_at[start] = length
        self._reserved += length
        insort(self._starts, start)
        return True

    def grow_many(self, owners: Sequence[int], total_tokens: Sequence[int]) -> bool:
        """Running sequences only: true while each stays inside its region."""
        return all(self.allocate(owner, tokens)
                   for owner, tokens in zip(owners, total_tokens, strict=True))

    def hand_out(self, owners: Sequence[int], counts: Sequence[int] | None = None) -> bool:
        raise KVCacheError("contiguous regions never grow: the caller assumed paged growth")

    def allocate_with_prefix(self, owner: int, keys: Sequence[int], total_tokens: int) -> bool:
        raise KVCacheError("contiguous reservation has no prefix cache")

    def free(self, owner: int, keys: Sequence[int] = (), computed_tokens: int = 0) -> int:
        region = self._region.pop(owner, None)
        if region is None:
            raise KVCacheError(f"request {owner} frees a KV region it does not hold")
        del self._starts[bisect_left(self._starts, region[0])]
        del self._length_at[region[0]]
        self._reserved -= region[1]
        return region[1]

    def owners(self) -> list[int]:
        return list(self._region)

    def check_invariants(self) -> None:
        """Regions lie inside the address space and never overlap; reserved + free blocks
        are the whole pool."""
        end = 0
        for first, length in sorted(self._region.values()):
            if first < end or length < 1:
                raise KVCacheError(f"a region at block {first} overlaps the one before it")
            end = first + length
        if end > self.num_blocks:
            raise KVCacheError("a region runs past the end of the pool")
        if (sorted(first for first, _ in self._region.values()) != self._starts
                or self._length_at != dict(self._region.values())):
            raise KVCacheError("the region index disagrees with the regions")
        if self._reserved != sum(self._length_at.values()):
            raise KVCacheError("the reserved-block count disagrees with the regions")
        if self.num_used + sum(self.holes()) != self.num_blocks:
            raise KVCacheError("reserved and free blocks do not add up to the pool")
