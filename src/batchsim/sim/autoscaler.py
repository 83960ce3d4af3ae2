"""The autoscaler: every `interval_s` a desired replica count from a load metric, stabilised
as the Kubernetes horizontal pod autoscaler does, applied to the replica pool (docs/design.md
§2, autoscaling; docs/how-to/autoscaling.md).

Desired = ceil(metric total / target), clamped to [min, max]: the total is the requests
queued or running at the serving replicas plus those waiting at the router (`outstanding`),
or the busy replica-seconds of the last interval over its length (`utilization`). The pool
grows to the smallest desired count of the last `scale_up_window_s` and shrinks to the largest
of the last `scale_down_window_s`, so a count must have held that long before it acts.
Everything is read at the evaluation instant, exactly as stepping one by one has it: counts
are constant inside a fast-path stretch, and busy time is kept from the instants a replica
starts and stops stepping (sim/engine.py `Replica.busy_seconds`).

A disaggregated arm's pools (sim/disaggregated.py) bring signals of their own, read through
`signal`: a latency (`ttft`, `itl`), for which desired = ceil(serving × observed / target),
the HPA's rule for a per-replica average it cannot divide, or the decode replicas' summed KV
use (`kv_utilization`), divided by the target like the load totals.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import simpy

from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.replica_pool import ReplicaPool, SlotState

# A metric total a rounding error above a whole multiple of the target asks for no more.
_CEIL_SLACK = 1e-9
# Metrics that are a latency per request, not a total over the replicas.
LATENCY_METRICS = frozenset({"ttft", "itl"})


@dataclass(frozen=True, slots=True)
class AutoscalerSettings:
    """The experiment's `autoscaler` as plain values (experiment/schema/autoscaler.py)."""

    min_replicas: int
    max_replicas: int
    initial_replicas: int
    metric: Literal["outstanding", "utilization", "ttft", "itl", "kv_utilization"]
    target: float
    interval_s: float
    scale_up_window_s: float
    scale_down_window_s: float
    cold_start_s: float


class MeteredReplica(Protocol):
    index: int
    policy: BatchingPolicy

    def busy_seconds(self, now: float) -> float: ...


@dataclass(slots=True)
class Stabiliser:
    """The HPA's stabilisation windows over the recommendations of each evaluation."""

    up_window_s: float
    down_window_s: float
    _history: deque[tuple[float, int]]

    @classmethod
    def of(cls, settings: AutoscalerSettings) -> Stabiliser:
        return cls(settings.scale_up_window_s, settings.scale_down_window_s, deque())

    def decide(self, now: float, desired: int, current: int) -> int:
        history = self._history
        history.append((now, desired))
        horizon = now - max(self.up_window_s, self.down_window_s)
        while history[0][0] < horizon:
            history.popleft()
        grow_to = min(d for t, d in history if t >= now - self.up_window_s)
        shrink_to = max(d for t, d in history if t >= now - self.down_window_s)
        if grow_to > current:
            return grow_to
        if shrink_to < current:
            return shrink_to
        return current


class Autoscaler:
    """The evaluation process over `pool`; `held()` is the requests waiting at the router and
    `finished()` says the run has nothing left to serve (the process then ends, so the
    simulation does); `signal()`, a pool's own metric, is read once per evaluation."""

    def __init__(self, env: simpy.Environment, settings: AutoscalerSettings, pool: ReplicaPool,
                 replicas: Sequence[MeteredReplica], held: Callable[[], int],
                 finished: Callable[[], bool],
                 signal: Callable[[], float] | None = None) -> None:
        self.env = env
        self.settings = settings
        self.pool = pool
        self.replicas = replicas
        self.held = held
        self.finished = finished
        self.signal = signal
        self._stabiliser = Stabiliser.of(settings)
        self._busy_at_last = [0.0] * len(replicas)

    def start(self) -> None:
        self.env.process(self._run())

    def wake_from_zero(self) -> None:
        """An arrival found no replica serving or starting (scaled to zero): start one now,
        as Knative's activator does, rather than at the next evaluation."""
        if self.pool.committed() == 0:
            self.pool.scale_to(1)

    def _run(self) -> Generator[simpy.Event, object, None]:
        interval = self.settings.interval_s
        while True:
            yield self.env.timeout(interval)
            if self.finished():
                return
            self.evaluate()

    def evaluate(self) -> None:
        settings = self.settings
        total = self._metric_total()
        if settings.metric in LATENCY_METRICS:  # observed latency × the replicas serving it
            total *= self.pool.count(SlotState.SERVING)
        desired = math.ceil(total / settings.target - _CEIL_SLACK) if total > 0 else 0
        if self.held() and desired == 0:
            desired = 1  # requests wait for a replica
        desired = min(settings.max_replicas, max(settings.min_replicas, desired))
        current = self.pool.committed()
        decided = self._stabiliser.decide(self.env.now, desired, current)
        if decided != current:
            self.pool.scale_to(decided)

    def _metric_total(self) -> float:
        if self.signal is not None:
            return self.signal()
        if self.settings.metric == "outstanding":
            serving = [r for r, s in zip(self.replicas, self.pool.state, strict=True)
                       if s is SlotState.SERVING]
            return float(sum(r.policy.num_running + r.policy.num_waiting for r in serving)
                         + self.held())
        now, busy = self.env.now, 0.0
        for slot, replica in enumerate(self.replicas):  # slots: a decode pool's start past 0
            seconds = replica.busy_seconds(now)
            busy += seconds - self._busy_at_last[slot]
            self._busy_at_last[slot] = seconds
        return busy / self.settings.interval_s
