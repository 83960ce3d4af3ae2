"""The scaling signals of a disaggregated arm's pools (docs/design.md §2, autoscaling): the
prefill pool's time to first token, the decode pool's seconds per token and KV use. Each is
read once per evaluation of its pool's autoscaler and is exact at any instant: first tokens
come at the end of prefill steps, which are never stretched, the token meters read a
stretch as stepping one by one would (sim/token_meter.py), and free blocks are read through
the stretch-exact accessor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import simpy

from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.replica_pool import ReplicaPool, SlotState
from batchsim.sim.token_meter import TokenMeter


class FirstTokenSignal:
    """TTFT as the prefill pool's scaler sees it: the mean TTFT of the requests whose first
    token came since the last read, or the age of the oldest request still waiting for its
    first token if that is longer (a queue that grows is seen before its requests finish)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._pending: dict[int, float] = {}  # request id -> time its client sent it
        self._sum = 0.0
        self._count = 0

    def arrived(self, request_id: int, sent_s: float) -> None:
        self._pending[request_id] = sent_s

    def first_token(self, request_id: int, first_token_s: float) -> None:
        sent = self._pending.pop(request_id)
        self._sum += first_token_s - sent
        self._count += 1

    def dropped(self, request_id: int) -> None:
        self._pending.pop(request_id, None)

    def read(self) -> float:
        mean = self._sum / self._count if self._count else 0.0
        self._sum, self._count = 0.0, 0
        oldest = self.env.now - min(self._pending.values()) if self._pending else 0.0
        return max(mean, oldest)


class DecodeReplica(Protocol):
    policy: BatchingPolicy
    token_meter: TokenMeter | None

    def free_kv_blocks(self) -> int: ...


def seconds_per_token(env: simpy.Environment,
                      replicas: Sequence[DecodeReplica]) -> Callable[[], float]:
    """The decode pool's step seconds per emitted token since the last read (0: none)."""
    last = [(0.0, 0)] * len(replicas)

    def read() -> float:
        seconds, tokens = 0.0, 0
        for slot, replica in enumerate(replicas):
            assert replica.token_meter is not None
            now_seconds, now_tokens = replica.token_meter.read(env.now)
            seconds += now_seconds - last[slot][0]
            tokens += now_tokens - last[slot][1]
            last[slot] = (now_seconds, now_tokens)
        return seconds / tokens if tokens else 0.0

    return read


def kv_use(replicas: Sequence[DecodeReplica], pool: ReplicaPool) -> Callable[[], float]:
    """The serving decode replicas' used share of their KV blocks, summed."""
    def read() -> float:
        used = 0.0
        for replica, state in zip(replicas, pool.state, strict=True):
            if state is SlotState.SERVING:
                blocks = replica.policy.pool.num_blocks
                used += (blocks - replica.free_kv_blocks()) / blocks
        return used

    return read
