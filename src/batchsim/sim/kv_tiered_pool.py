"""A paged pool with prefix caching whose evicted blocks move down to lower tiers
(sim/kv_tiers.py), and whose prefix hits may come from any of them (docs/design.md §2,
"Tiered KV cache").

The GPU pool is the plain one; only eviction, the admission lookup and a prefix's reuse
differ. A hit on a lower tier takes a fresh GPU block, as a computed block would, and costs
its load time, which the admitting policy adds to the step (`take_load`). The router's prefix
signal (`cached_prefix_blocks`) stays the GPU's own; `tiered_prefix_blocks` is the tiered
prefix scorer's, which sees mid-stretch what the evictions a stretch has not applied yet would
have moved down or dropped (docs/design.md §2, "Weighted routing").
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import ClassVar

from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool, KVCacheError
from batchsim.sim.kv_tiers import KVTier, KVTierStack


class TieredKVBlockPool(KVBlockPool):
    """`KVBlockPool` with prefix caching over `tiers`, loads overlapped over `num_layers`."""

    __slots__ = ("_load_hits", "_load_s", "layers", "tiers")
    has_lower_tiers: ClassVar[bool] = True

    def __init__(self, num_blocks: int, block_size: int, tiers: list[KVTier], *,
                 layers: int = 1) -> None:
        super().__init__(num_blocks, block_size, prefix_caching=True)
        self.tiers = KVTierStack(tiers)
        self.layers = layers  # loads overlapped layer by layer over this many (1: none)
        self._load_s = 0.0  # load seconds of the admissions not yet taken by a plan
        self._load_hits: list[int] = [0] * len(tiers)  # per tier: blocks of the last admission

    def _evicted(self, key: int) -> None:
        """An evicted block's key moves to the tiers."""
        self.tiers.offload(key)

    def prefix_hit_blocks(self, keys: Sequence[int], limit: int) -> int:
        """How many of the leading `keys` (at most `limit`) are on the GPU or a tier, in a
        row."""
        cached, tiers = self._block_of_key, self.tiers
        count = 0
        for key in keys[:limit]:
            if key not in cached and tiers.find(key) < 0:
                break
            count += 1
        return count

    def tiered_prefix_blocks(self, keys: Sequence[int], limit: int, evicted: int = 0) -> int:
        """`prefix_hit_blocks` as it would be after the first `evicted` evictable GPU blocks
        were evicted, without evicting them: they move to the tiers, and what overflows the
        tiers leaves them in LRU order, the last tier's oldest first."""
        if not evicted:
            return self.prefix_hit_blocks(keys, limit)
        moved = [self._key_of_block[block] for block in islice(self._evictable, evicted)]
        dropped = self._dropped_by(moved)
        moved_set = set(moved)
        cached, tiers = self._block_of_key, self.tiers
        count = 0
        for key in keys[:limit]:
            if key in dropped:
                break
            if key not in moved_set and key not in cached and tiers.find(key) < 0:
                break
            count += 1
        return count

    def _dropped_by(self, moved: list[int]) -> set[int]:
        """The keys that offloading `moved` in order would push out of the last tier: each
        tier passes on its oldest keys once full, so the drops are the first of the tiers'
        keys from the bottom up, then of `moved`, as many as the tiers lack room for."""
        free = sum(max(0, tier.room - len(tier.keys)) for tier in self.tiers.tiers)
        count = len(moved) - free
        dropped: set[int] = set()
        for held in [*(tier.keys for tier in reversed(self.tiers.tiers)), moved]:
            if count <= 0:
                break
            taken = list(islice(held, count))
            dropped.update(taken)
            count -= len(taken)
        return dropped

    def evictable_prefix_blocks(self, keys: Sequence[int], count: int) -> int:
        """How many of the first `count` keys an eviction could take from a lookup: cached
        on the GPU with no user, or in a tier (an eviction's cascade can push it out)."""
        cached = self._block_of_key
        return sum(1 for key in keys[:count]
                   if key not in cached or cached[key] in self._evictable)

    def allocate_with_prefix(self, owner: int, keys: Sequence[int], total_tokens: int) -> bool:
        """`KVBlockPool.allocate_with_prefix` where `keys` may also be in tiers: each such key
        gets a fresh GPU block, cached under it, and its tier's load time."""
        if owner in self._owned:
            raise KVCacheError(f"request {owner} reuses a prefix while holding blocks")
        cached = self._block_of_key
        shared = [cached.get(key) for key in keys]
        on_gpu = [block for block in shared if block is not None]
        revived = sum(1 for block in on_gpu if block in self._evictable)
        fresh = max(len(shared) - len(on_gpu),
                    self.blocks_for(total_tokens) - len(on_gpu))
        if fresh > self.num_free - revived:
            return False
        for block in on_gpu:
            self._refs[block] += 1
            self._evictable.pop(block, None)
        loaded = [(index, key) for index, (key, block) in enumerate(zip(keys, shared,
                                                                        strict=True))
                  if block is None]
        for _, key in loaded:  # out of the tiers before taking blocks can push keys down
            tier = self.tiers.find(key)
            self._load_s += self.tiers.load(key, tier)
            self._load_hits[tier] += 1
        for (index, key), block in zip(loaded, self._take(len(loaded)), strict=True):
            shared[index] = block
            cached[key] = block
            self._key_of_block[block] = key
            self._refs[block] = 1
        self._owned[owner] = [block for block in shared if block is not None]
        if self.blocks_for(total_tokens) > len(shared):
            self.allocate(owner, total_tokens)
        return True

    def take_load(self) -> tuple[float, list[int]]:
        """The load seconds and per-tier blocks of the admissions since the last call."""
        load, hits = self._load_s, self._load_hits
        self._load_s, self._load_hits = 0.0, [0] * len(hits)
        return load, hits

    def cache_blocks(self, owner: int, keys: Sequence[int], computed_tokens: int) -> None:
        """`KVBlockPool.cache_blocks`; a key it caches leaves any tier that held a copy."""
        start = self._registered.get(owner, 0)
        super().cache_blocks(owner, keys, computed_tokens)
        end = self._registered.get(owner, 0)
        for key in keys[start:end]:
            self.tiers.discard(key)

    def check_invariants(self) -> None:
        super().check_invariants()
        self.tiers.check_invariants(set(self._block_of_key))


class TierSwapSpace(HostSwapSpace):
    """Swap space inside the first tier (a CPU tier): a swapped-out request's blocks are
    pinned there and push its least recently used cached keys down, instead of using a host
    area of their own (`kv_cache.swap_space_gb`)."""

    __slots__ = ("_tiers",)

    def __init__(self, tiers: KVTierStack) -> None:
        super().__init__(tiers.tiers[0].capacity_blocks)
        self._tiers = tiers

    def try_store(self, owner: int, num_blocks: int) -> bool:
        if owner in self._held:
            raise KVCacheError(f"request {owner} is already swapped out")
        if not self._tiers.pin(num_blocks):
            return False
        self._held[owner] = num_blocks
        return True

    def release(self, owner: int) -> int:
        blocks = super().release(owner)
        self._tiers.unpin(blocks)
        return blocks
