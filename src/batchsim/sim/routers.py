"""Routers: which replica an arriving request goes to (docs/design.md §2).

A router sees each replica's load at the arrival instant and the arrival's sequence number;
ties go to the lowest replica index so that runs are deterministic. `READS` says which parts
of the load each router reads, so that dispatch measures only those (reading a replica's free
blocks mid-stretch costs a search, and a router that reads nothing should cost nothing per
replica).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What a router may know about a replica when a request arrives."""

    outstanding: int  # requests queued or running there
    free_kv_blocks: int
    cached_prefix_blocks: int = 0  # leading prompt blocks of the arrival cached there


Router = Callable[[Sequence[ReplicaLoad], int], int]


def round_robin(loads: Sequence[ReplicaLoad], sequence_number: int) -> int:
    return sequence_number % len(loads)


def least_outstanding(loads: Sequence[ReplicaLoad], sequence_number: int) -> int:
    """Fewest requests at the replica, queued plus running."""
    counts = [load.outstanding for load in loads]
    return counts.index(min(counts))


def least_kv(loads: Sequence[ReplicaLoad], sequence_number: int) -> int:
    """Most free KV-cache blocks (the replica least likely to preempt)."""
    free = [load.free_kv_blocks for load in loads]
    return free.index(max(free))


def prefix_affinity(loads: Sequence[ReplicaLoad], sequence_number: int) -> int:
    """The longest cached prefix of the arrival's prompt (prefix caching), then the fewest
    requests: the same conversation keeps landing where its context is cached."""
    best = max(load.cached_prefix_blocks for load in loads)
    return least_outstanding([load if load.cached_prefix_blocks == best
                              else ReplicaLoad(1 << 62, 0) for load in loads], sequence_number)


@dataclass(frozen=True, slots=True)
class LoadReads:
    """The parts of `ReplicaLoad` a router reads; the others may be left at zero."""

    outstanding: bool = True
    free_kv_blocks: bool = True
    cached_prefix_blocks: bool = True

    @property
    def any(self) -> bool:
        return self.outstanding or self.free_kv_blocks or self.cached_prefix_blocks


READS_ALL = LoadReads()


ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
    "least_kv": least_kv,
    "prefix_affinity": prefix_affinity,
}

# What each router above reads of the loads; a router not listed is given every part.
READS: dict[Router, LoadReads] = {
    round_robin: LoadReads(False, False, False),
    least_outstanding: LoadReads(True, False, False),
    least_kv: LoadReads(False, True, False),
    prefix_affinity: LoadReads(True, False, True),
}


def reads_of(router: Router) -> LoadReads:
    return READS.get(router, READS_ALL)
