"""The KV link: latency + bytes / bandwidth alone, processor sharing when concurrent, busy time."""

from __future__ import annotations

import math

import pytest
import simpy

from batchsim.sim.kv_link import KVLink

GB = 1e9


def _link(bandwidth: float = 10 * GB, latency: float = 1e-3) -> tuple[simpy.Environment, KVLink]:
    env = simpy.Environment()
    return env, KVLink(env, bandwidth_bytes_s=bandwidth, latency_s=latency)


def _send_at(env: simpy.Environment, link: KVLink, at: float, num_bytes: float,
             arrivals: dict[str, float], name: str) -> None:
    def go(_event: object) -> None:
        link.send(num_bytes, lambda: arrivals.__setitem__(name, env.now))
    env.timeout(at).callbacks.append(go)


def test_one_transfer_takes_latency_plus_bytes_over_bandwidth() -> None:
    env, link = _link()
    arrivals: dict[str, float] = {}
    _send_at(env, link, 0.5, 2 * GB, arrivals, "a")
    env.run()
    assert arrivals["a"] == pytest.approx(0.5 + 1e-3 + 0.2, rel=1e-12)
    assert link.bytes_sent == 2 * GB


def test_two_concurrent_transfers_share_the_bandwidth() -> None:
    """Started together, equal sizes: each moves at half speed and both end at 2b/bw."""
    env, link = _link(latency=0.0)
    arrivals: dict[str, float] = {}
    _send_at(env, link, 0.0, 1 * GB, arrivals, "a")
    _send_at(env, link, 0.0, 1 * GB, arrivals, "b")
    env.run()
    assert arrivals["a"] == pytest.approx(0.2, rel=1e-12)
    assert arrivals["b"] == pytest.approx(0.2, rel=1e-12)


def test_a_transfer_joining_later_slows_the_first_exactly() -> None:
    """bw 10 GB/s. a: 2 GB at t=0; b: 0.5 GB at t=0.1. Alone until 0.1, a has 1 GB left; then
    each gets 5 GB/s: b leaves at 0.2, a has 0.5 GB left and ends alone at 0.25."""
    env, link = _link(latency=0.0)
    arrivals: dict[str, float] = {}
    _send_at(env, link, 0.0, 2 * GB, arrivals, "a")
    _send_at(env, link, 0.1, 0.5 * GB, arrivals, "b")
    env.run()
    assert arrivals["b"] == pytest.approx(0.2, rel=1e-12)
    assert arrivals["a"] == pytest.approx(0.25, rel=1e-12)


def test_latency_does_not_occupy_the_link() -> None:
    """Two back-to-back transfers with a long latency: the second's bytes are not slowed by the
    first's latency, and each arrival is its bytes' end plus the latency."""
    env, link = _link(latency=1.0)
    arrivals: dict[str, float] = {}
    _send_at(env, link, 0.0, 1 * GB, arrivals, "a")  # bytes leave by 0.1
    _send_at(env, link, 0.1, 1 * GB, arrivals, "b")  # alone on the link from 0.1 to 0.2
    env.run()
    assert arrivals["a"] == pytest.approx(1.1, rel=1e-12)
    assert arrivals["b"] == pytest.approx(1.2, rel=1e-12)


def test_utilisation_is_busy_time_over_duration() -> None:
    """Busy from 0 to 0.2 (two sharing) and from 1.0 to 1.1: 0.3 s busy out of 2 s."""
    env, link = _link(latency=0.5)
    arrivals: dict[str, float] = {}
    _send_at(env, link, 0.0, 1 * GB, arrivals, "a")
    _send_at(env, link, 0.0, 1 * GB, arrivals, "b")
    _send_at(env, link, 1.0, 1 * GB, arrivals, "c")
    env.run()
    assert link.busy_seconds(0.0, 2.0) == pytest.approx(0.3, rel=1e-12)
    assert link.utilization(0.0, 2.0) == pytest.approx(0.15, rel=1e-12)
    assert link.utilization(0.1, 1.05) == pytest.approx(0.15 / 0.95, rel=1e-12)  # clipped
    # Work conservation: while busy the link moves bytes at its full bandwidth.
    assert link.busy_seconds(0.0, 2.0) * link.bandwidth == pytest.approx(link.bytes_sent)


def test_an_ideal_link_delivers_at_once() -> None:
    """Infinite bandwidth and no latency: the callback runs before `send` returns."""
    env, link = _link(bandwidth=math.inf, latency=0.0)
    arrived: list[float] = []
    link.send(5 * GB, lambda: arrived.append(env.now))
    assert arrived == [0.0]
    assert link.busy_seconds(0.0, 1.0) == 0.0


def test_a_pipelined_first_part_pays_no_latency() -> None:
    env, link = _link(latency=1.0)
    arrivals: dict[str, float] = {}

    def second() -> None:
        link.send(1 * GB, lambda: arrivals.__setitem__("whole", env.now))

    link.send(1 * GB, second, pay_latency=False)
    env.run()
    assert arrivals["whole"] == pytest.approx(0.2 + 1.0, rel=1e-12)
    assert len(link.busy_start) == 1  # one busy interval: the stream never paused
