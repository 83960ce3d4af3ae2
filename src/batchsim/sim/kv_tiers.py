"""Lower KV tiers (host memory, disk, a remote store): LRU stores of prefix-cache block keys
below the GPU pool (docs/design.md §2, "Tiered KV cache").

A tier holds keys, not blocks: what a GPU block held is named by its prefix key, and a tier
only has to know which keys it has and in what order they were last used. A key lives in one
place at a time (the GPU pool or exactly one tier): a block the GPU evicts moves to the first
tier with any capacity, and whatever that pushes out of a tier moves to the next one, out of
the last one for good; a key loaded back onto the GPU leaves its tier. A CPU tier can also
hold blocks swapped out by preemption (`TierSwapSpace`); those are pinned, never evicted, and
take capacity from the cached keys.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


class KVTierError(RuntimeError):
    """An invariant of the tiers was violated: a bug, never a user error."""


@dataclass(slots=True)
class KVTier:
    """One tier: `capacity_blocks` blocks of `block_bytes`, loaded onto the GPU at
    `seconds_per_block` each (0: infinite bandwidth), and what it has moved."""

    kind: str
    capacity_blocks: int
    seconds_per_block: float
    keys: OrderedDict[int, None] = field(default_factory=OrderedDict)  # LRU first
    pinned: int = 0  # blocks swapped out by preemption (a CPU tier), never evicted
    blocks_stored: int = 0  # keys that moved in (from the GPU or the tier above)
    blocks_evicted: int = 0  # keys pushed out of this tier
    blocks_loaded: int = 0  # keys loaded back onto the GPU (prefix hits)
    load_seconds: float = 0.0  # the load time of every block it loaded

    @property
    def room(self) -> int:
        """Blocks the cached keys may take: the capacity less the pinned blocks."""
        return self.capacity_blocks - self.pinned


class KVTierStack:
    """The tiers below one GPU pool, first (fastest) first."""

    __slots__ = ("tiers",)

    def __init__(self, tiers: list[KVTier]) -> None:
        self.tiers = tiers

    def offload(self, key: int, start: int = 0) -> None:
        """A key the GPU evicted (or tier `start - 1` pushed out): into the first tier from
        `start` with room, cascading what falls out of each tier into the next; out of the last
        one it is gone. A key no tier can hold (every capacity 0) is dropped, as without tiers."""
        moving: int | None = key
        for tier in self.tiers[start:]:
            if moving is None:
                return
            if tier.room <= 0:
                continue
            tier.keys[moving] = None
            tier.blocks_stored += 1
            moving = None
            if len(tier.keys) > tier.room:
                moving, _ = tier.keys.popitem(last=False)
                tier.blocks_evicted += 1

    def find(self, key: int) -> int:
        """The index of the tier holding `key`, or -1."""
        for index, tier in enumerate(self.tiers):
            if key in tier.keys:
                return index
        return -1

    def load(self, key: int, tier_index: int) -> float:
        """Take `key` out of its tier onto the GPU; returns its load seconds."""
        tier = self.tiers[tier_index]
        del tier.keys[key]
        tier.blocks_loaded += 1
        tier.load_seconds += tier.seconds_per_block
        return tier.seconds_per_block

    def discard(self, key: int) -> None:
        """The GPU computed `key` again (a duplicate of a tier's copy): the GPU block is the
        one place it lives now."""
        for tier in self.tiers:
            if key in tier.keys:
                del tier.keys[key]
                return

    def pin(self, blocks: int) -> bool:
        """Hold `blocks` swapped-out blocks in the first tier (a CPU tier), pushing its least
        recently used cached keys down; False, changing nothing, if its capacity cannot."""
        tier = self.tiers[0]
        if tier.pinned + blocks > tier.capacity_blocks:
            return False
        tier.pinned += blocks
        while len(tier.keys) > max(0, tier.room):
            key, _ = tier.keys.popitem(last=False)
            tier.blocks_evicted += 1
            self.offload(key, start=1)
        return True

    def unpin(self, blocks: int) -> None:
        tier = self.tiers[0]
        if blocks > tier.pinned:
            raise KVTierError(f"{blocks} swapped blocks released, {tier.pinned} pinned")
        tier.pinned -= blocks

    def check_invariants(self, gpu_keys: set[int] | None = None) -> None:
        """Capacities hold and no key is in two places (two tiers, or a tier and the GPU)."""
        seen: set[int] = set(gpu_keys or ())
        for tier in self.tiers:
            if len(tier.keys) > max(0, tier.room) or tier.pinned > tier.capacity_blocks:
                raise KVTierError(f"the {tier.kind} tier holds {len(tier.keys)} keys and "
                                  f"{tier.pinned} pinned blocks in {tier.capacity_blocks}")
            if not seen.isdisjoint(tier.keys):
                raise KVTierError(f"a key of the {tier.kind} tier is also elsewhere")
            seen.update(tier.keys)
