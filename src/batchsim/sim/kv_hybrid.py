"""The paged KV pool of a hybrid model: full-attention blocks plus a fixed set per sequence.

A hybrid model's cache per sequence is full_bytes_per_token x context (full-attention layers)
+ windowed_bytes_per_token x min(context, window) (sliding-window layers) + state bytes
(linear-attention layers) (docs/design.md §2, hybrid models). The pool's blocks are sized by the
full-attention part, which grows a block every `block_size` tokens exactly as a plain pool's
does; the bounded rest is held as `sequence_blocks` extra blocks that a sequence takes with its
first allocation and gives back when freed. Those extra blocks are sized for a whole window:
a sequence shorter than the window is charged the window (vLLM frees a sliding layer's blocks
only as they leave the window, so a long sequence holds exactly this). Growth, and so the
fast path's arithmetic over `held`, concerns the full-attention blocks only: `held` counts
them, never the extra ones.

Prefix caching is not offered for these pools (the experiment refuses it): a prefix hit would
also need the windowed blocks and the recurrent state at the hit's end, which vLLM keeps only
for some models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from batchsim.sim.kv_cache import KVBlockPool, KVCacheError

if TYPE_CHECKING:
    from batchsim.sim.request import Request


class HybridKVBlockPool(KVBlockPool):
    """`KVBlockPool` whose every owner also holds `sequence_blocks` fixed blocks."""

    __slots__ = ("_fixed", "sequence_blocks")

    def __init__(self, num_blocks: int, block_size: int, *, sequence_blocks: int) -> None:
        super().__init__(num_blocks, block_size, prefix_caching=False)
        if sequence_blocks < 0:
            raise ValueError("sequence_blocks must be non-negative")
        self.sequence_blocks = sequence_blocks
        self._fixed: dict[int, list[int]] = {}

    def lifetime_tokens(self, request: Request) -> int:
        """Prompt and output, plus the fixed blocks as tokens of their own: what the policies'
        never-fits check compares with the whole pool."""
        return super().lifetime_tokens(request) + self.sequence_blocks * self.block_size

    def allocate(self, owner: int, total_tokens: int) -> bool:
        """`KVBlockPool.allocate`, a new owner also taking its fixed blocks; all or nothing."""
        if owner in self._fixed or not self.sequence_blocks:
            return super().allocate(owner, total_tokens)
        need = self.blocks_for(total_tokens) - self.held(owner)
        if need <= 0:  # nothing to hold yet: no KV, so no fixed blocks either
            return True
        if need + self.sequence_blocks > self.num_free:
            return False
        self._fixed[owner] = self._take(self.sequence_blocks)
        return super().allocate(owner, total_tokens)

    def grow_many(self, owners: Sequence[int], total_tokens: Sequence[int]) -> bool:
        """`allocate` for several owners, all or nothing; owners new to the pool one by one."""
        if all(owner in self._fixed for owner in owners) or not self.sequence_blocks:
            return super().grow_many(owners, total_tokens)
        needs = [max(self.blocks_for(tokens) - self.held(owner), 0)
                 + (0 if owner in self._fixed else self.sequence_blocks)
                 for owner, tokens in zip(owners, total_tokens, strict=True)]
        if sum(needs) > self.num_free:
            return False
        for owner, tokens in zip(owners, total_tokens, strict=True):
            self.allocate(owner, tokens)
        return True

    def allocate_with_prefix(self, owner: int, keys: Sequence[int], total_tokens: int) -> bool:
        raise KVCacheError("prefix caching is not modelled for hybrid-attention pools")

    def free(self, owner: int, keys: Sequence[int] = (), computed_tokens: int = 0) -> int:
        """Return `owner`'s blocks, its fixed ones included; returns how many were released."""
        released = super().free(owner, keys, computed_tokens)
        fixed = self._fixed.pop(owner, None)
        if fixed is None:
            return released
        self._free.extend(fixed)
        return released + len(fixed)

    def check_invariants(self) -> None:
        """The parent's invariants with the fixed blocks counted as owned."""
        for owner, blocks in self._fixed.items():
            if owner not in self._owned:
                raise KVCacheError(f"request {owner} holds fixed blocks but no KV blocks")
            if len(blocks) != self.sequence_blocks:
                raise KVCacheError(f"request {owner} holds {len(blocks)} fixed blocks")
        owned = self._owned
        merged = {owner: owned[owner] + self._fixed.get(owner, []) for owner in owned}
        self._owned = merged
        try:
            super().check_invariants()
        finally:
            self._owned = owned


__all__ = ["HybridKVBlockPool"]
