"""Paged KV cache: a pool of fixed-size blocks owned by requests (vLLM's block manager, simplified).

Blocks have ids so that double frees and leaks are detectable. With prefix caching (vLLM v1's
design, docs/design.md §3) a full block whose content is named by a prefix key stays cached after
its
owner leaves: reference-counted while requests use it, on an LRU list of evictable blocks when
none does, reusable until allocation evicts it. Evictable blocks count as free everywhere
(`num_free`, allocation, the fast path's growth bounds), since allocation takes them exactly
as it takes free ones.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from batchsim.sim.request import Request


class KVCacheError(RuntimeError):
    """An invariant of the block pool was violated: a bug, never a user error."""


class KVBlockPool:
    """`num_blocks` blocks of `block_size` tokens; each request holds a list of block ids."""

    __slots__ = ("_block_of_key", "_evictable", "_free", "_key_of_block", "_owned", "_refs",
                 "_registered", "block_size", "num_blocks", "prefix_caching")
    # Whether a request holds exactly the blocks of the tokens it has asked room for, so a
    # decoding batch takes blocks as kv_growth.py counts (a contiguous pool reserves ahead).
    exact_growth: ClassVar[bool] = True
    allocation: ClassVar[str] = "paged"  # how blocks are laid out (kv_cache.allocation)
    has_lower_tiers: ClassVar[bool] = False  # KV tiers below it (a TieredKVBlockPool's)
    has_holes: ClassVar[bool] = False  # can free memory be unusable (external fragmentation)

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = False) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a KV block pool needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        # A stack (taken from the end) so that a request's blocks come off it in one slice.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._owned: dict[int, list[int]] = {}
        # Prefix cache: key <-> block for cached blocks, how many owners use each, and the
        # unused ones in least-recently-used order (the first is evicted first).
        self._block_of_key: dict[int, int] = {}
        self._key_of_block: dict[int, int] = {}
        self._refs: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._registered: dict[int, int] = {}  # per owner: leading blocks already offered

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: free ones and cached ones no request uses."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free) - len(self._evictable)  # − num_free

    @property
    def num_free_uncached(self) -> int:
        """Free blocks holding nothing: allocations up to this many evict no cached block."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks holding a cached prefix block, used or evictable."""
        return len(self._key_of_block)

    def lifetime_tokens(self, request: Request) -> int:
        """The most tokens `request` ever holds KV for: its prompt and whole output."""
        return request.prompt_tokens + request.output_tokens

    def register(self, request: Request) -> None:
        """A request was queued: a pool that reserves per request up front learns its size
        here; a paged pool allocates as tokens arrive and needs nothing."""

    def refused_by_fragmentation(self) -> int:
        """Requests refused although the free blocks sufficed: none, blocks being
        interchangeable (a contiguous pool counts them)."""
        return 0

    def unusable_free_blocks(self, request: Request | None) -> int:
        """Free blocks `request` could not use if admitted now: none, any free block serving
        any request (a contiguous pool counts its holes too small for it)."""
        return 0

    def _take(self, count: int) -> list[int]:
        """`count` blocks for new content: free ones first, then the least recently used
        cached ones (the caller has checked that there are enough)."""
        free = self._free
        from_free = min(count, len(free))
        taken = free[len(free) - from_free:]
        del free[len(free) - from_free:]
        for _ in range(count - from_free):
            block, _ = self._evictable.popitem(last=False)
            key = self._key_of_block.pop(block)
            del self._block_of_key[key]
            del self._refs[block]
            self._evicted(key)
            taken.append(block)
        return taken

    def _evicted(self, key: int) -> None:
        """A cached block's content, `key`, left the GPU (a tiered pool offloads it)."""

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

    def allocate(self, owner: int, total_tokens: int) -> bool:
        """Make `owner` hold enough blocks for `total_tokens`; all or nothing.

        Returns False, changing nothing, when the pool lacks the blocks: the caller decides
        whether to preempt someone and retry.
        """
        # Inlined (`held`, `blocks_for`, `num_free`, `_take`'s free-stack case): planning
        # calls this for every running request at a block boundary, about once per step.
        blocks = self._owned.get(owner)
        held = len(blocks) if blocks else 0
        if total_tokens <= held * self.block_size:
            return True  # the common case: the last block still has room
        need = -(-total_tokens // self.block_size) - held
        free = self._free
        end = len(free) - need
        if end >= 0:  # all from the free stack, as `_take` takes them
            taken = free[end:]
            del free[end:]
        elif need > len(free) + len(self._evictable):  # more than `num_free`
            return False
        else:
            taken = self._take(need)
        if blocks is None:
            self._owned[owner] = taken
        else:
            blocks.extend(taken)
        return True

    def grow_many(self, owners: Sequence[int], total_tokens: Sequence[int]) -> bool:
        """`allocate` for several owners at once, all or nothing (the fast path's bulk step).

        Plain Python, not numpy: batches are tens of requests, where numpy's per-call
        overhead costs more than the arithmetic."""
        owned, block_size = self._owned, self.block_size
        short: list[tuple[int, int]] = []
        total = 0
        for owner, tokens in zip(owners, total_tokens, strict=True):
            blocks = owned.get(owner)
            need = -(-tokens // block_size) - (len(blocks) if blocks else 0)
            if need > 0:
                short.append((owner, need))
                total += need
        if total > self.num_free:
            return False
        free = self._free
        if total > len(free):  # some come from the prefix cache's LRU list: one by one
            for owner, need in short:
                owned.setdefault(owner, []).extend(self._take(need))
            return True
        # One slice off the stack, handed out as taking each owner's blocks in turn would.
        end = len(free)
        taken = free[end - total:]
        del free[end - total:]
        for owner, need in short:
            owned.setdefault(owner, []).extend(taken[total - need:total])
            total -= need
        return True

    def hand_out(self, owners: Sequence[int], counts: Sequence[int] | None = None) -> bool:
        """Give each of `owners`, who all hold blocks, `counts[i]` more blocks (one each
        when None); all or nothing, the same blocks `grow_many` would hand out.

        For a caller that already knows what each owner lacks (the fast path with exact
        allocation), so the pool need not be asked how many blocks each holds."""
        total = len(owners) if counts is None else sum(counts)
        free, owned = self._free, self._owned
        if total > len(free):  # some come from the prefix cache's LRU list: one by one
            if total > len(free) + len(self._evictable):  # more than `num_free`
                return False
            for owner, need in zip(owners, counts or [1] * total, strict=True):
                owned[owner].extend(self._take(need))
            return True
        end = len(free) - total
        taken = free[end:]
        del free[end:]
        if counts is None:  # `grow_many`'s order: the first owner gets the slice's last block
            for owner, block in zip(owners, reversed(taken), strict=True):
                owned[owner].append(block)
            return True
        for owner, need in zip(owners, counts, strict=True):
            owned[owner].extend(taken[total - need:total])
            total -= need
        return True

    def cached_prefix_blocks(self, keys: Sequence[int], limit: int, evicted: int = 0) -> int:
        """How many of the leading `keys` (at most `limit`) are cached, in a row: a lookup that
        changes nothing (admission may still fail). `evicted` counts as gone the first that
        many evictable blocks (a router's view mid-stretch, before they are taken)."""
        if not self.prefix_caching:
            return 0
        gone = set(islice(self._evictable, evicted)) if evicted else set()
        count = 0
        cached = self._block_of_key
        for key in keys[:limit]:
            block = cached.get(key)
            if block is None or block in gone:
                break
            count += 1
        return count

    def tiered_prefix_blocks(self, keys: Sequence[int], limit: int, evicted: int = 0) -> int:
        """`cached_prefix_blocks` counting the lower tiers too; a pool without tiers has only
        the GPU's."""
        return self.cached_prefix_blocks(keys, limit, evicted)

    def prefix_hit_blocks(self, keys: Sequence[int], limit: int) -> int:
        """An admission's lookup: `cached_prefix_blocks` here; a tiered pool also finds
        blocks in its lower tiers."""
        return self.cached_prefix_blocks(keys, limit)

    def evictable_prefix_blocks(self, keys: Sequence[int], count: int) -> int:
        """How many of the first `count` keys' cached blocks no request uses."""
        return sum(1 for key in keys[:count] if self._block_of_key[key] in self._evictable)

    def allocate_with_prefix(self, owner: int, keys: Sequence[int], total_tokens: int) -> bool:
        """Make a newly admitted `owner` use the cached blocks of `keys` (all cached: see
        `cached_prefix_blocks`) and hold fresh blocks for the rest of `total_tokens`; all or
        nothing, like `allocate`."""
        if owner in self._owned:
            raise KVCacheError(f"request {owner} reuses a prefix while holding blocks")
        shared = [self._block_of_key[key] for key in keys]
        revived = sum(1 for block in shared if block in self._evictable)
        fresh = max(0, self.blocks_for(total_tokens) - len(shared))
        if fresh > self.num_free - revived:
            return False
        for block in shared:
            self._refs[block] += 1
            self._evictable.pop(block, None)
        self._owned[owner] = shared
        if fresh:
            self.allocate(owner, total_tokens)
        return True

    def cache_blocks(self, owner: int, keys: Sequence[int], computed_tokens: int) -> None:
        """Offer `owner`'s blocks whose tokens are all computed to the prefix cache, block i
        under `keys[i]`, as vLLM v1 does once a block is full: from then on other requests
        may share it. A block whose key another block already caches stays private (a
        duplicate computed concurrently) and is freed with its owner."""
        blocks = self._owned.get(owner)
        if not self.prefix_caching or blocks is None:
            return
        start = self._registered.get(owner, 0)
        end = min(len(keys), computed_tokens // self.block_size, len(blocks))
        for index in range(start, end):
            block, key = blocks[index], keys[index]
            if block in self._refs or key in self._block_of_key:
                continue  # already shared from the cache, or a duplicate
            self._block_of_key[key] = block
            self._key_of_block[block] = key
            self._refs[block] = 1
        if end > start:
            self._registered[owner] = end

    def free(self, owner: int, keys: Sequence[int] = (), computed_tokens: int = 0) -> int:
        """Return all of `owner`'s blocks to the pool; returns how many were released.

        With prefix caching its computed blocks with keys are cached first (`cache_blocks`; a
        block allocated for a step that never ran holds no KV), then every cached block it
        used loses a reference, joining the LRU list at none, its last block first (evicted
        first); the rest are free.
        """
        self.cache_blocks(owner, keys, computed_tokens)
        blocks = self._owned.pop(owner, None)
        if blocks is None:
            raise KVCacheError(f"request {owner} frees KV blocks it does not hold")
        if not self.prefix_caching:
            self._free.extend(blocks)
            return len(blocks)
        self._registered.pop(owner, None)
        refs = self._refs
        # Tail first, as vLLM 0.12.0 frees them (vllm/v1/core/single_type_kv_cache_manager.py,
        # SingleTypeKVCacheManager.free): a prefix's last blocks are evicted before its first,
        # which more requests share and a preempted request finds again.
        for block in reversed(blocks):
            if block in refs:
                self._release_cached(block)
            else:
                self._free.append(block)
        return len(blocks)

    def _release_cached(self, block: int) -> None:
        refs = self._refs[block] - 1
        self._refs[block] = refs
        if refs == 0:
            self._evictable[block] = None  # most recently used: evicted last

    def owners(self) -> list[int]:
        return list(self._owned)

    def check_invariants(self) -> None:
        """Every block is free, cached and evictable, or owned: by exactly one request, or, if
        cached, by as many requests as its reference count says."""
        seen: set[int] = set(self._free)
        if len(seen) != len(self._free):
            raise KVCacheError("a block is on the free list twice")
        for block in self._evictable:
            if block in seen or self._refs.get(block) != 0:
                raise KVCacheError(f"evictable block {block} is also free or still in use")
            seen.add(block)
        users: dict[int, int] = {}
        for owner, blocks in self._owned.items():
            if len(set(blocks)) != len(blocks):
                raise KVCacheError(f"request {owner} holds a block twice")
            for block in blocks:
                if block in self._refs:
                    users[block] = users.get(block, 0) + 1
                    continue
                if block in seen:
                    raise KVCacheError(f"block {block} of request {owner} is also elsewhere")
                seen.add(block)
        self._check_cache_maps(users)
        seen.update(users)
        if len(seen) != self.num_blocks:
            raise KVCacheError(f"{self.num_blocks - len(seen)} KV blocks leaked")

    def _check_cache_maps(self, users: dict[int, int]) -> None:
        """Keys and blocks map one to one, and every reference count counts its users."""
        if len(self._block_of_key) != len(self._key_of_block) or any(
                self._key_of_block.get(block) != key
                for key, block in self._block_of_key.items()):
            raise KVCacheError("the prefix cache's key and block maps disagree")
        if set(self._refs) != set(self._key_of_block):
            raise KVCacheError("a cached block has no reference count, or a count no block")
        for block, refs in self._refs.items():
            if users.get(block, 0) != refs:
                raise KVCacheError(f"cached block {block} has {refs} references, "
                                   f"{users.get(block, 0)} users")


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


def pool_block_keys(ids: np.ndarray, block_tokens: int, pool_block_size: int,
                    prompt_tokens: int) -> tuple[int, ...]:
    """The prefix-cache key of each full KV block (of `pool_block_size` tokens) of a prompt.

    A prompt's block ids (`traffic.PrefixBlockIds`) are chained (an id names its block and
    everything before it), so the prefix ending at token e, inside trace block s, is named
    exactly by (ids[s], e): the key of pool block j, ending at e = (j + 1)·pool_block_size,
    packs that pair into one int. This holds for any two block sizes; only pool blocks that
    the ids cover and that end inside the prompt get a key (the last id's block may be partial).
    """
    covered = min(ids.size * block_tokens, prompt_tokens)
    ends = np.arange(1, covered // pool_block_size + 1, dtype=np.int64) * pool_block_size
    owners = ids[(ends - 1) // block_tokens].tolist()
    return tuple((owner << 32) | end for owner, end in zip(owners, ends.tolist(), strict=True))
