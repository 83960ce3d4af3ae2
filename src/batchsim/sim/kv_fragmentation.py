"""How much of a replica's KV cache is reserved but unused, step by step (the summary's
`kv_fragmentation`, metrics/kv_fragmentation.py).

Two kinds, both in tokens of the cache's capacity (`num_blocks × block_size`):

- internal: tokens reserved by the requests holding KV minus the tokens whose KV they have
  written (`num_computed_tokens`) — the unused tail of each sequence's last block in a paged
  pool, the unwritten rest of each region in a contiguous one (sim/kv_contiguous.py);
- external: free tokens in holes too small for the region of the request at the head of the
  waiting queue, the next to be admitted (none when nothing waits) — memory that request cannot
  use though it is free; zero in a paged pool, where any free block serves any request.

Each step is sampled once, after the policy applied it (where the step log reads `kv_used`),
and weighted by its seconds; a fast-path stretch's steps are sampled by arithmetic, to the
same values in the same order as stepping one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol, runtime_checkable

from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.request import Request

_COMPUTED = attrgetter("num_computed_tokens")


@runtime_checkable
class HoldsKV(Protocol):
    """A policy that can say which of its requests hold KV now."""

    pool: KVBlockPool

    def kv_holders(self) -> Sequence[Request]: ...

    def waiting_head(self) -> Request | None: ...


@dataclass(slots=True)
class FragmentationMeter:
    """One replica's time integrals and peaks of internal and external fragmentation."""

    pool: KVBlockPool
    holders: Callable[[], Sequence[Request]]  # the policy's `kv_holders`
    head: Callable[[], Request | None]  # and its `waiting_head`
    busy_s: float = 0.0
    internal_token_s: float = 0.0  # ∫ internal tokens dt over the replica's steps
    external_token_s: float = 0.0
    sequence_s: float = 0.0  # ∫ requests holding KV dt
    internal_peak: int = 0  # tokens
    external_peak: int = 0
    max_sequences: int = 0  # most requests holding KV at once

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.pool.block_size

    @property
    def refused_by_fragmentation(self) -> int:
        return self.pool.refused_by_fragmentation()

    def _reserved_minus_written(self, holders: Sequence[Request]) -> int:
        """Internal fragmentation now, in tokens. Without prefix caching the holders are the
        pool's owners, so what they hold is the pool's use (read once, not per request:
        this runs at every step); shared prefix blocks count once per request using them."""
        pool = self.pool
        written = sum(map(_COMPUTED, holders))
        if not pool.prefix_caching:
            return pool.num_used * pool.block_size - written
        return sum(pool.held(r.request_id) for r in holders) * pool.block_size - written

    def sample(self, seconds: float) -> None:
        """The state after a step of `seconds` was applied."""
        holders = self.holders()
        self._add(self._reserved_minus_written(holders), self.external_now(), len(holders),
                  seconds)

    def external_now(self) -> int:
        """External fragmentation now, in blocks: a stretch reads it at its start, since the
        arrival that ends it changes the waiting queue after its bulk steps but before they
        are applied. A paged pool has none, and is not asked (this runs at every step)."""
        pool = self.pool
        return pool.unusable_free_blocks(self.head()) if pool.has_holes else 0

    def sample_stretch(self, decoding: int, kv_used: list[int], durations: list[float],
                       external: int) -> None:
        """The steps a stretch applies in bulk, sampled before they are applied: step j
        (of `durations`) ends with `decoding` requests one token further each and the pool
        holding `kv_used[j]` blocks (sim/stretch.py), beyond the `kv_used[0]` held at its
        start by the same requests; `external` is `external_now()` at its start (regions
        do not move during it). One pass with local sums (a stretch is tens of steps, at
        every scheduling event), within rounding of sampling each step."""
        holders = self.holders()
        block_size = self.pool.block_size
        # Step j's internal fragmentation: now's, plus the blocks taken since, minus the
        # (j + 1) tokens each decode has written by its end.
        base = self._reserved_minus_written(holders) - kv_used[0] * block_size
        written = 0
        weighted = seconds_total = 0.0
        peak = self.internal_peak
        for used, seconds in zip(kv_used, durations, strict=True):
            written += decoding
            internal = base + used * block_size - written
            weighted += internal * seconds
            seconds_total += seconds
            if internal > peak:
                peak = internal
        self.internal_peak = peak
        self.internal_token_s += weighted
        self._add(0, external, len(holders), seconds_total)

    def _add(self, internal: int, external_blocks: int, sequences: int, seconds: float) -> None:
        self.busy_s += seconds
        self.internal_token_s += internal * seconds
        self.sequence_s += sequences * seconds
        if internal > self.internal_peak:
            self.internal_peak = internal
        if sequences > self.max_sequences:
            self.max_sequences = sequences
        if external_blocks:
            external = external_blocks * self.pool.block_size
            self.external_token_s += external * seconds
            if external > self.external_peak:
                self.external_peak = external


def meter_for(policy: object) -> FragmentationMeter | None:
    """A meter for a policy that names its KV holders; None for one that does not (the two
    pools of a disaggregated arm hand KV over between them)."""
    if isinstance(policy, HoldsKV):
        return FragmentationMeter(policy.pool, policy.kv_holders, policy.waiting_head)
    return None
