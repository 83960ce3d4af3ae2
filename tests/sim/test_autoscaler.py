"""The replica pool and the autoscaler on scripted loads: a scale-up and scale-down timeline
computed by hand (cold starts, the stabilisation window, a drain), and scaling from zero."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np
import simpy

from batchsim.metrics.autoscaling import active, integral
from batchsim.sim.autoscaler import Autoscaler, AutoscalerSettings, Stabiliser
from batchsim.sim.replica_pool import ReplicaPool


@dataclass
class _Queues:
    num_running: int = 0
    num_waiting: int = 0


@dataclass
class _Replica:
    index: int
    policy: _Queues = field(default_factory=_Queues)

    def busy_seconds(self, now: float) -> float:
        return 0.0


def _settings(**keys: float) -> AutoscalerSettings:
    base = {"min_replicas": 1, "max_replicas": 4, "initial_replicas": 1,
            "metric": "outstanding", "target": 2.0, "interval_s": 10.0,
            "scale_up_window_s": 0.0, "scale_down_window_s": 20.0, "cold_start_s": 5.0}
    base.update(keys)
    return AutoscalerSettings(**base)  # type: ignore[arg-type]


def _timeline(pool: ReplicaPool) -> list[tuple[float, int, int, int]]:
    tl = pool.timeline
    return list(zip(tl.t, tl.serving, tl.starting, tl.draining, strict=True))


def test_a_scale_up_and_down_timeline_computed_by_hand() -> None:
    """Target 2 per replica, evaluated every 10 s. 5 requests wait until t = 25, then 1:
    t=10 wants ceil(5/2) = 3, two replicas start and serve at 15 (5 s cold start); t=30 and
    40 want 1 but the 20 s down window still holds a 3; t=50 shrinks to 1: slot 2, the
    highest, holds a request and drains until it ends at 55, slot 1 stops at once."""
    env = simpy.Environment()
    replicas = [_Replica(i) for i in range(4)]
    served: list[float] = []
    pool = ReplicaPool(env, replicas, 1, 5.0, lambda: served.append(env.now))
    held = {"n": 5}
    done = {"yes": False}
    scaler = Autoscaler(env, _settings(), pool, replicas, lambda: held["n"],
                        lambda: done["yes"])

    def script() -> Generator[simpy.Event, object, None]:
        yield env.timeout(25)
        held["n"] = 1
        yield env.timeout(24)
        replicas[2].policy.num_running = 1  # still running when the drain begins
        yield env.timeout(6)
        replicas[2].policy.num_running = 0
        pool.request_ended(2)
        done["yes"] = True

    env.process(script())
    scaler.start()
    env.run()
    assert _timeline(pool) == [(0.0, 1, 0, 0), (10.0, 1, 2, 0), (15.0, 3, 0, 0),
                               (50.0, 1, 0, 1), (55.0, 1, 0, 0)]
    assert served == [15.0, 15.0]
    assert [r.index for r in pool.routable] == [0]
    assert (pool.timeline.scale_ups, pool.timeline.scale_downs) == (1, 1)
    # Replica-seconds to 60 s: 1·10 + 3·5 (two starting) + 3·35 + 2·5 (one draining) + 1·5.
    assert integral(pool.timeline, active(pool.timeline), 0.0, 60.0) == 145.0


def test_scaling_from_zero_starts_a_replica_at_once() -> None:
    env = simpy.Environment()
    replicas = [_Replica(i) for i in range(2)]
    pool = ReplicaPool(env, replicas, 0, 3.0, lambda: None)
    scaler = Autoscaler(env, _settings(min_replicas=0, initial_replicas=0), pool, replicas,
                        lambda: 1, lambda: True)
    assert pool.committed() == 0 and pool.routable == []
    scaler.wake_from_zero()
    scaler.wake_from_zero()  # one is starting: no second one
    env.run()
    assert _timeline(pool) == [(0.0, 0, 1, 0), (3.0, 1, 0, 0)]


def test_a_cancelled_cold_start_does_not_serve_later() -> None:
    env = simpy.Environment()
    replicas = [_Replica(i) for i in range(3)]
    pool = ReplicaPool(env, replicas, 1, 5.0, lambda: None)
    pool.scale_to(3)
    pool.scale_to(2)  # the highest starting slot is stopped, never drained
    env.run()
    assert _timeline(pool) == [(0.0, 1, 1, 0), (5.0, 2, 0, 0)]
    assert [r.index for r in pool.routable] == [0, 1]


def test_stabiliser_grows_on_the_window_minimum_and_shrinks_on_its_maximum() -> None:
    stabiliser = Stabiliser(up_window_s=10.0, down_window_s=0.0, _history=deque())
    assert stabiliser.decide(0.0, 3, 1) == 3  # nothing earlier in the window
    assert stabiliser.decide(5.0, 5, 3) == 3  # the window's minimum is 3
    assert stabiliser.decide(16.0, 5, 3) == 5  # (5, 5) held for the window
    assert stabiliser.decide(17.0, 2, 5) == 2  # no down window: at once


def test_a_fixed_pool_integrates_to_replicas_times_time() -> None:
    pool = ReplicaPool(simpy.Environment(), [_Replica(i) for i in range(2)], 2, 0.0,
                       lambda: None)
    assert np.isclose(integral(pool.timeline, active(pool.timeline), 0.5, 4.0), 7.0)
