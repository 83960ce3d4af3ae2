"""Streaming the tokens back: one API-server process per replica, one message at a time."""

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
from batchsim.sim.recorder import RunRecord
from batchsim.sim.traffic import ClosedLoopTraffic, OpenLoopTraffic
from tests.policies.test_invariants import LinearCost


def test_a_step_is_seen_once_its_messages_and_those_before_are_streamed() -> None:
    frontend = Frontend(stream_s=0.001)
    stream = frontend.stream(0)
    assert stream is not None
    assert stream.shown(1.0, 4) == pytest.approx(1.004)  # the server was idle
    assert stream.shown(1.002, 4) == pytest.approx(1.008)  # behind the step before
    assert stream.shown(2.0, 1) == pytest.approx(2.001)  # caught up meanwhile


def test_a_request_is_taken_in_behind_the_tokens_before_it() -> None:
    """The server that streams a replica's tokens takes in its requests too, in turn: a
    request sent while it is behind reaches the scheduler when it has caught up."""
    frontend = Frontend(serial_s=0.002, stream_s=0.001)
    stream = frontend.stream(0)
    assert stream is not None
    stream.shown(1.0, 10)  # busy until 1.010
    assert frontend.reaches_scheduler(1.001) == pytest.approx(1.012)
    assert stream.shown(1.011, 1) == pytest.approx(1.013)  # and tokens behind the request


def test_a_stretch_streams_the_steps_that_ended_before_a_request_is_taken_in() -> None:
    frontend = Frontend(stream_s=0.001)
    stream = frontend.stream(0)
    assert stream is not None
    stream.stretch_started([1.0, 1.01, 1.02, 1.03], 5)
    assert frontend.reaches_scheduler(1.015) == pytest.approx(1.015)  # two steps streamed
    assert frontend.reaches_scheduler(1.0155) == pytest.approx(1.0155)
    assert stream.stretch_done(3) == pytest.approx([1.005, 1.015, 1.025])


def test_no_stream_without_a_cost_and_none_for_a_replica_without_a_server() -> None:
    assert Frontend().stream(0) is None
    assert Frontend(stream_s=0.001, servers=1).stream(1) is None
    with pytest.raises(ValueError, match="must be >= 0"):
        Frontend(stream_s=-1.0)


def _policy() -> ChunkedPrefill:
    return ChunkedPrefill(pool=KVBlockPool(20_000, 16), token_budget=512, max_num_seqs=64)


def _closed_loop(stream_s: float, users: int, output: int, *, fast_path: bool = True,
                 serial_s: float = 0.0, requests: int | None = None) -> RunRecord:
    traffic = ClosedLoopTraffic(users, 0.0, lambda: itertools.repeat((32, output)),
                                requests or 6 * users, None)
    frontend = Frontend(serial_s=serial_s, stream_s=stream_s)
    return Simulation([_policy()], LinearCost(), traffic, frontend=frontend,
                      fast_path=fast_path).run()


@settings(max_examples=20, deadline=None)
@given(stream_s=st.floats(1e-5, 5e-4), users=st.integers(1, 24), output=st.integers(1, 60),
       serial_s=st.sampled_from([0.0, 1e-3]))
def test_the_fast_path_streams_exactly_as_stepping_one_by_one(
        stream_s: float, users: int, output: int, serial_s: float) -> None:
    fast = _closed_loop(stream_s, users, output, serial_s=serial_s)
    slow = _closed_loop(stream_s, users, output, serial_s=serial_s, fast_path=False)
    for a, b in zip(fast.requests, slow.requests, strict=True):
        assert (a.arrival_s, a.first_token_s, a.finish_s) == pytest.approx(
            (b.arrival_s, b.first_token_s, b.finish_s), abs=1e-12)
    count = len(fast.requests)
    for gaps, same in zip(fast.itl.gaps_by_request(count), slow.itl.gaps_by_request(count),
                          strict=True):
        assert gaps == pytest.approx(same, abs=1e-12)


def _output_rate(record: RunRecord) -> float:
    """Output tokens the clients saw per second, from the first send to the last token."""
    tokens = sum(r.output_tokens for r in record.requests)
    return tokens / max(r.finish_s for r in record.requests)


def test_the_stream_caps_the_output_token_rate_at_one_message_per_cost() -> None:
    """32 users decoding cost the linear engine ~2.6 ms a step: ~12,000 tokens/s. A server
    that streams 5,000 messages a second holds the clients to that rate, and the engine then
    idles while its clients wait on the server; at 50,000 a second it binds nowhere."""
    free = _closed_loop(0.0, 32, 200)
    assert _output_rate(free) > 10_000
    capped = _closed_loop(2e-4, 32, 200)
    assert _output_rate(capped) == pytest.approx(5_000, rel=0.03)
    busy = capped.steps.column("duration_s").sum()  # the engine waits on the server
    assert busy < 0.6 * max(r.finish_s for r in capped.requests)
    loose = _closed_loop(2e-5, 32, 200)
    assert _output_rate(loose) == pytest.approx(_output_rate(free), rel=0.02)


def test_an_open_loop_request_waits_behind_the_backlog_at_its_send_time() -> None:
    """Two long requests fill the stream; a third sent while the server is behind reaches the
    scheduler only once the tokens streamed before its send are out."""
    traffic = OpenLoopTraffic(np.array([0.0, 0.0, 0.5]), np.array([32, 32, 32]),
                              np.array([400, 400, 4]))
    frontend = Frontend(stream_s=4e-3)  # 2 messages per step of ~2 ms: the server falls behind
    requests = Simulation([_policy()], LinearCost(), traffic, frontend=frontend).run().requests
    third = requests[2]
    assert third.arrival_s == 0.5
    assert third.first_scheduled_s > 0.5 + 0.1  # a backlog of seconds' worth of tokens
