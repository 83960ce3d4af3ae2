"""What the weighted router sees of the replicas, and how old it is (docs/design.md §2,
"Weighted routing").

With `signal_delay_s` 0 each arrival reads every replica's exact state. Otherwise the load
signals (requests queued and running, free KV blocks, queued prompt tokens) come from a
snapshot taken at every multiple of `signal_delay_s`, as a router scraping its replicas'
metrics on an interval sees them: between 0 and `signal_delay_s` old. The prefix-cache signals
(the GPU's, and the GPU's with the lower KV tiers') are always current: llm-d's precise prefix
scorer follows the replicas' KV-cache events.

The snapshots are taken by one SimPy process at its own ticks, never by the replicas' steps, so
the hot path pays nothing. While no request is at any replica the state does not change, so the
process sleeps instead of ticking (the run would otherwise never end) and the next arrival
wakes it.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import Protocol

import simpy

from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.request import Request
from batchsim.sim.scorers import ReplicaSignals
from batchsim.sim.weighted_router import WeightedRouter


class Observed(Protocol):
    """What the view reads of a replica."""

    policy: BatchingPolicy

    def free_kv_blocks(self) -> int: ...

    def cached_prefix_blocks(self, request: Request) -> int: ...

    def tiered_prefix_blocks(self, request: Request) -> int: ...


class SignalView:
    def __init__(self, env: simpy.Environment, replicas: Sequence[Observed],
                 router: WeightedRouter) -> None:
        self.env = env
        self.replicas = replicas
        self.interval = router.signal_delay_s
        self.count_own = router.count_own_assignments and self.interval > 0
        self.track_tokens = router.needs_queued_tokens
        self.tiered = router.needs_tiered_prefix
        # Requests routed to each replica and maybe not yet prefilled (for queued tokens),
        # by replica: an autoscaled pool's serving replicas change places.
        self._routed: dict[int, list[Request]] = {}
        self._snapshot: list[ReplicaSignals] = []
        self._snapshot_of: list[Observed] = []  # the replicas, in the snapshot's order
        self._own: list[tuple[int, int, int]] = []  # per replica: requests, tokens, blocks
        self._asleep: simpy.Event | None = None
        if self.interval > 0:
            self._take()
            env.process(self._refresh())

    def signals(self, request: Request) -> list[ReplicaSignals]:
        """Every replica as the router sees it at `request`'s arrival."""
        if self.interval > 0 and not self._same_replicas():  # an autoscaled pool changed
            self._take()
        if self._asleep is not None:
            self._asleep.succeed()
            self._asleep = None
        seen = self._current() if self.interval == 0 else self._delayed()
        if not request.prefix_keys:
            return seen
        tiered = self.tiered
        return [ReplicaSignals(s.outstanding, s.running, s.free_kv_blocks, s.kv_blocks,
                               s.prefill_tokens_ahead, r.cached_prefix_blocks(request),
                               r.tiered_prefix_blocks(request)
                               if tiered and r.policy.pool.has_lower_tiers else None)
                for s, r in zip(seen, self.replicas, strict=True)]

    def assigned(self, index: int, request: Request, cached_blocks: int) -> None:
        """The router sent `request` to replica `index`, where `cached_blocks` of it were
        cached."""
        self.track(index, request)
        if self.count_own:
            block = self.replicas[index].policy.pool.block_size
            new_tokens = max(0, request.prompt_tokens - cached_blocks * block)
            count, tokens, blocks = self._own[index]
            self._own[index] = (count + 1, tokens + new_tokens,
                                blocks + -(-new_tokens // block))

    def track(self, index: int, request: Request) -> None:
        """`request` went to replica `index`: its prompt is queued there until computed."""
        if self.track_tokens:
            self._routed.setdefault(id(self.replicas[index]), []).append(request)

    def _current(self) -> list[ReplicaSignals]:
        return [self._read(i) for i in range(len(self.replicas))]

    def _read(self, index: int) -> ReplicaSignals:
        replica = self.replicas[index]
        policy = replica.policy
        return ReplicaSignals(policy.num_running + policy.num_waiting, policy.num_running,
                              replica.free_kv_blocks(), policy.pool.num_blocks,
                              self._queued_tokens(index))

    def _queued_tokens(self, index: int) -> int:
        """Prompt tokens routed to the replica and not yet computed. Within a fast-path
        stretch every running request is decoding, so its prompt is all computed either way."""
        if not self.track_tokens:
            return 0
        key = id(self.replicas[index])
        routed = [r for r in self._routed.get(key, ()) if not r.is_finished]
        self._routed[key] = routed
        return sum(max(0, r.prompt_tokens - r.num_computed_tokens) for r in routed)

    def _delayed(self) -> list[ReplicaSignals]:
        if not self.count_own:
            return self._snapshot
        return [ReplicaSignals(s.outstanding + count, s.running, s.free_kv_blocks - blocks,
                               s.kv_blocks, s.prefill_tokens_ahead + tokens)
                for s, (count, tokens, blocks) in zip(self._snapshot, self._own, strict=True)]

    def _same_replicas(self) -> bool:
        return len(self._snapshot_of) == len(self.replicas) and all(
            a is b for a, b in zip(self._snapshot_of, self.replicas, strict=True))

    def _take(self) -> None:
        self._snapshot = self._current()
        self._snapshot_of = list(self.replicas)
        self._own = [(0, 0, 0)] * len(self.replicas)

    def _idle(self) -> bool:
        return all(r.policy.num_running + r.policy.num_waiting == 0 for r in self.replicas)

    def _refresh(self) -> Generator[simpy.Event, object, None]:
        interval = self.interval
        tick = 0
        while True:
            if self._idle():
                self._asleep = self.env.event()
                yield self._asleep
                tick = math.floor(self.env.now / interval)
            tick += 1
            yield self.env.timeout(max(0.0, tick * interval - self.env.now))
            self._take()
