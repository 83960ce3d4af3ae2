"""The engine's front end: a latency every request pays, and a serial part paid in turn."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.sim.engine import Simulation
from batchsim.sim.frontend import Frontend
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.traffic import ClosedLoopTraffic, OpenLoopTraffic
from tests.policies.test_invariants import LinearCost


def _policy() -> ChunkedPrefill:
    return ChunkedPrefill(pool=KVBlockPool(4000, 16), token_budget=512, max_num_seqs=64)


def test_requests_sent_together_reach_the_scheduler_one_after_another() -> None:
    frontend = Frontend(latency_s=0.05, serial_s=0.01)
    reached = [frontend.reaches_scheduler(0.0) for _ in range(3)]
    assert reached == pytest.approx([0.06, 0.07, 0.08])
    # A request sent after the queue drained waits for nobody.
    assert frontend.reaches_scheduler(1.0) == pytest.approx(1.06)


def test_each_replica_has_its_own_api_server() -> None:
    """Replicas behind a router each tokenise their own requests: with two servers, two of
    four requests sent together are through the serial part at once."""
    frontend = Frontend(latency_s=0.05, serial_s=0.01, servers=2)
    reached = [frontend.reaches_scheduler(0.0) for _ in range(4)]
    assert reached == pytest.approx([0.06, 0.06, 0.07, 0.07])
    with pytest.raises(ValueError, match="at least one server"):
        Frontend(serial_s=0.01, servers=0)


def test_streaming_servers_take_no_requests_in() -> None:
    """A disaggregated deployment's decode instances stream through servers of their own:
    requests go in only through the first ones, and each streaming server is its own."""
    frontend = Frontend(serial_s=0.01, servers=1, stream_s=1e-3, stream_servers=2)
    assert frontend.intake_servers == 1
    reached = [frontend.reaches_scheduler(0.0) for _ in range(3)]
    assert reached == pytest.approx([0.01, 0.02, 0.03])
    first, second = frontend.stream(1), frontend.stream(2)
    assert first is not None and second is not None
    # Each streams its own step's messages from its own backlog, not the intake's.
    assert first.shown(0.0, 5) == pytest.approx(0.005)
    assert second.shown(0.0, 2) == pytest.approx(0.002)
    assert frontend.stream(3) is None  # no server of its own


def test_negative_costs_are_refused() -> None:
    with pytest.raises(ValueError, match="front-end costs must be >= 0"):
        Frontend(latency_s=-1.0)


def _open_loop(frontend: Frontend | None) -> list:
    traffic = OpenLoopTraffic(np.array([0.0, 0.0, 0.3, 2.0]), np.array([40, 300, 8, 90]),
                              np.array([5, 9, 3, 4]))
    return Simulation([_policy()], LinearCost(), traffic, frontend=frontend).run().requests


def test_a_latency_alone_shifts_every_open_loop_request_by_itself() -> None:
    """Open-loop arrivals do not depend on completions, so a pure latency moves every event
    of the run by the same amount: client-seen TTFT and E2E grow by exactly it."""
    bare, delayed = _open_loop(None), _open_loop(Frontend(latency_s=0.25))
    for a, b in zip(bare, delayed, strict=True):
        assert b.arrival_s == a.arrival_s  # the client's send time
        assert b.first_token_s - b.arrival_s == pytest.approx(
            a.first_token_s - a.arrival_s + 0.25, abs=1e-12)
        assert b.finish_s - b.arrival_s == pytest.approx(a.finish_s - a.arrival_s + 0.25,
                                                         abs=1e-12)


def _closed_loop(frontend: Frontend, users: int = 4, requests: int = 12) -> list:
    traffic = ClosedLoopTraffic(users, 0.0, lambda: itertools.repeat((64, 8)), requests, None)
    return Simulation([_policy()], LinearCost(), traffic, frontend=frontend).run().requests


def test_a_closed_loop_sends_exactly_num_requests_while_requests_are_on_their_way() -> None:
    requests = _closed_loop(Frontend(latency_s=0.1, serial_s=0.02))
    assert len(requests) == 12 and all(r.is_finished for r in requests)


def test_the_serial_part_spreads_a_wave_the_latency_does_not() -> None:
    """Four users send at t=0: with a latency alone they reach the scheduler together; with
    a serial part they reach it `serial_s` apart, in send order."""
    together = _closed_loop(Frontend(latency_s=0.1))[:4]
    assert [r.first_scheduled_s for r in together] == pytest.approx([0.1] * 4)
    spread = _closed_loop(Frontend(serial_s=0.03))[:4]
    firsts = sorted(r.first_scheduled_s for r in spread)
    assert firsts[0] == pytest.approx(0.03)
    assert np.all(np.diff(firsts) >= 0.03 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(latency=st.floats(0, 0.2), serial=st.floats(0, 0.05), users=st.integers(1, 6))
def test_every_request_waits_at_least_the_front_end(latency: float, serial: float,
                                                    users: int) -> None:
    for request in _closed_loop(Frontend(latency, serial), users=users, requests=3 * users):
        assert request.first_scheduled_s - request.arrival_s >= latency + serial - 1e-9
        assert request.first_token_s - request.arrival_s > latency + serial - 1e-9
