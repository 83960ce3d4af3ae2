"""What the weighted router sees (sim/signal_view.py): with `signal_delay_s` the snapshot
taken at the last multiple of it, plus the router's own assignments since when counted; the
snapshot process sleeps while no request is anywhere, so a run still ends."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import simpy

from batchsim.sim.request import Request
from batchsim.sim.signal_view import SignalView
from batchsim.sim.weighted_router import WeightedRouter


@dataclass
class _Pool:
    block_size: int = 16
    num_blocks: int = 100


@dataclass
class _Policy:
    num_running: int = 0
    num_waiting: int = 0
    pool: _Pool = field(default_factory=_Pool)


@dataclass
class _Replica:
    policy: _Policy = field(default_factory=_Policy)
    free: int = 100

    def free_kv_blocks(self) -> int:
        return self.free

    def cached_prefix_blocks(self, request: Request) -> int:
        return 0


def _watch(count_own: bool) -> tuple[list[tuple[float, list[tuple[int, int]]]], float]:
    """(time, [(outstanding, free blocks) per replica]) as seen by arrivals at set times, with
    the state changed at set times; and when the run ended."""
    env = simpy.Environment()
    a, b = _Replica(), _Replica()
    router = WeightedRouter((("queue_depth", 1.0),), signal_delay_s=1.0,
                            count_own_assignments=count_own)
    view = SignalView(env, [a, b], router)  # type: ignore[list-item]
    seen: list[tuple[float, list[tuple[int, int]]]] = []

    def script() -> Generator[simpy.Event, object, None]:
        def at(t: float) -> simpy.Event:
            return env.timeout(t - env.now)

        def arrive(index: int) -> None:
            request = Request(len(seen), env.now, 40, 8)  # 40 tokens: 3 blocks of 16
            seen.append((env.now, [(s.outstanding, s.free_kv_blocks)
                                   for s in view.signals(request)]))
            view.assigned(index, request, 0)

        yield at(0.5)
        a.policy.num_waiting, a.free = 3, 70
        yield at(0.6)
        arrive(1)  # the snapshot of t=0: all idle
        yield at(1.2)
        b.policy.num_running = 5
        yield at(1.5)
        arrive(1)  # the snapshot of t=1
        yield at(1.7)
        arrive(1)
        yield at(2.1)
        arrive(0)  # the snapshot of t=2
        yield at(2.5)
        a.policy.num_waiting = b.policy.num_running = 0

    env.process(script())
    env.run()
    return seen, env.now


def test_the_router_sees_the_last_refresh() -> None:
    seen, ended = _watch(count_own=False)
    assert seen == [(0.6, [(0, 100), (0, 100)]), (1.5, [(3, 70), (0, 100)]),
                    (1.7, [(3, 70), (0, 100)]), (2.1, [(3, 70), (5, 100)])]
    assert ended == 3.0  # the tick at 3 s finds nothing anywhere and the process sleeps


def test_own_assignments_since_the_refresh_are_counted() -> None:
    """The arrival at 0.6 s went to replica 1 after the t=0 snapshot, but the t=1 snapshot
    replaces it; those at 1.5 s and 1.7 s add a request and 3 blocks each to replica 1."""
    seen, _ = _watch(count_own=True)
    assert seen == [(0.6, [(0, 100), (0, 100)]), (1.5, [(3, 70), (0, 100)]),
                    (1.7, [(3, 70), (1, 97)]), (2.1, [(3, 70), (5, 100)])]


def test_no_delay_reads_the_state_at_the_arrival() -> None:
    env = simpy.Environment()
    a = _Replica(_Policy(num_running=2, num_waiting=1), free=40)
    view = SignalView(env, [a], WeightedRouter((("kv_use", 1.0),)))  # type: ignore[list-item]
    (signals,) = view.signals(Request(0, 0.0, 40, 8))
    assert (signals.outstanding, signals.running, signals.free_kv_blocks,
            signals.kv_blocks) == (3, 2, 40, 100)
    env.run()
    assert env.now == 0.0  # no snapshot process without a delay
