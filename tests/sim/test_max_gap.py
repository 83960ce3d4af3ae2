"""The longest token gap, per gap (`itl_s.max`) and per request (`max_gap_s`), by hand and as
a property of the flat ITL log."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.metrics.summary import SLOTargets, summarize
from batchsim.metrics.tables import requests_table
from batchsim.sim import recorder
from batchsim.sim.recorder import ITLLog, RunRecord
from batchsim.sim.request import Request, RequestStatus


def _emit(record: RunRecord, requests: list[Request], now: float) -> None:
    for request in requests:
        request.num_generated += 1
    record.record_tokens(requests, now)


def _hand_record() -> RunRecord:
    """Four requests; times in quarters, so every gap is exact in binary."""
    record = RunRecord()
    r0, r1, r2, r3 = (Request(i, arrival_s=0.5 * i, prompt_tokens=8, output_tokens=8)
                      for i in range(4))
    for request in (r0, r1, r2, r3):
        record.add_request(request)
    _emit(record, [r0, r1], 1.0)  # first tokens
    _emit(record, [r0, r1], 1.25)  # a batch run: 0.25 each
    _emit(record, [r0, r1], 2.0)  # the same run continues: 0.75 each
    _emit(record, [r3], 2.0)  # r3's only token: no gap
    _emit(record, [r2], 2.25)
    _emit(record, [r0, r1, r2], 2.5)  # a new batch: 0.5, 0.5, 0.25 are singles
    _emit(record, [r0], 3.0)  # 0.5
    _emit(record, [r0, r1], 4.0)  # 1.0 and 1.5: r1's stall
    for request in (r0, r1, r2, r3):
        request.status = RequestStatus.FINISHED
        request.first_scheduled_s = request.arrival_s
        request.finish_s = request.last_token_s
    return record


def test_max_gap_by_hand() -> None:
    record = _hand_record()
    table = requests_table(record.requests, record.itl)
    got = table["max_gap_s"].tolist()
    assert got[:3] == [1.0, 1.5, 0.25]
    assert math.isnan(got[3])  # one token: no gap


def test_itl_max_and_max_gap_summary_by_hand() -> None:
    record = _hand_record()
    table = requests_table(record.requests, record.itl)
    metrics = summarize(table, record, warmup_s=0.0, cooldown_s=0.0, slo=SLOTargets())
    itl, per_request = metrics["itl_s"], metrics["max_gap_s"]
    assert isinstance(itl, dict) and isinstance(per_request, dict)
    # gaps: r0 0.25 0.75 0.5 0.5 1.0; r1 0.25 0.75 0.5 1.5; r2 0.25
    assert itl["max"] == 1.5
    assert itl["mean"] == (0.25 * 3 + 0.75 * 2 + 0.5 * 3 + 1.0 + 1.5) / 10
    assert per_request["max"] == 1.5
    assert per_request["p50"] == 1.0  # of 0.25, 1.0, 1.5 (r3 has none)
    assert per_request["mean"] == (0.25 + 1.0 + 1.5) / 3


def test_no_gap_gives_none() -> None:
    record = RunRecord()
    request = Request(0, arrival_s=0.0, prompt_tokens=8, output_tokens=1)
    record.add_request(request)
    _emit(record, [request], 1.0)
    request.status, request.finish_s, request.first_scheduled_s = RequestStatus.FINISHED, 1.0, 0.0
    table = requests_table(record.requests, record.itl)
    metrics = summarize(table, record, warmup_s=0.0, cooldown_s=0.0, slo=SLOTargets())
    assert metrics["itl_s"]["max"] is None  # type: ignore[index]
    assert metrics["max_gap_s"]["max"] is None  # type: ignore[index]


_gaps = st.lists(st.floats(0.001, 1.0), min_size=1, max_size=6)
_ids = st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True)


@settings(max_examples=100, deadline=None)
@given(runs=st.lists(st.tuples(_ids, _gaps), max_size=6),
       singles=st.lists(st.tuples(st.integers(0, 9), st.floats(0.001, 1.0)), max_size=8),
       counted=st.lists(st.booleans(), min_size=10, max_size=10))
def test_max_over_requests_is_the_pooled_max(runs, singles, counted) -> None:
    log = ITLLog()
    expected: list[list[float]] = [[] for _ in range(10)]
    for ids, gaps in runs:
        log.add_run(np.array(ids), np.array(gaps))
        for i in ids:
            expected[i] += gaps
    for request_id, gap in singles:
        log.add_singles(np.array([request_id]), np.array([gap]))
        expected[request_id].append(gap)
    longest = log.max_gap_by_request(10)
    for request_id, gaps in enumerate(expected):
        assert (math.isnan(longest[request_id]) if not gaps
                else longest[request_id] == max(gaps)), request_id
    mask = np.array(counted)
    values, _ = log.values_and_weights(mask)
    per_request = longest[mask]
    per_request = per_request[~np.isnan(per_request)]
    assert values.size == per_request.size == 0 or values.max() == per_request.max()


def test_blocks_of_runs_give_the_same_maxima(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs are spread over their ids a block at a time; blocks that cut a run give the same."""
    rng = np.random.default_rng(3)
    log = ITLLog()
    for _ in range(40):
        ids = rng.choice(30, size=int(rng.integers(1, 8)), replace=False)
        log.add_run(ids, rng.random(int(rng.integers(1, 4))))
    whole = log.max_gap_by_request(30)
    for block in (1, 2, 5, 64):
        monkeypatch.setattr(recorder, "_MAX_GAP_BLOCK", block)
        assert np.array_equal(log.max_gap_by_request(30), whole, equal_nan=True), block


@settings(max_examples=50, deadline=None)
@given(steps=st.lists(st.tuples(st.lists(st.booleans(), min_size=4, max_size=4),
                                st.floats(0.001, 2.0)), min_size=1, max_size=20))
def test_summary_max_bounds_the_tail_and_equals_the_max_over_requests(steps) -> None:
    """Random emissions of four requests: max ≥ p99 ≥ p50 for the gaps and per request, and
    the longest gap over requests is the longest pooled gap."""
    record = RunRecord()
    requests = [Request(i, arrival_s=0.0, prompt_tokens=8, output_tokens=8) for i in range(4)]
    for request in requests:
        record.add_request(request)
    now = 0.0
    for emits, gap in steps:
        now += gap
        _emit(record, [r for r, emits_now in zip(requests, emits, strict=True) if emits_now], now)
    for request in requests:
        request.status, request.first_scheduled_s = RequestStatus.FINISHED, 0.0
        request.finish_s = request.last_token_s if request.num_generated else 0.0
    table = requests_table(record.requests, record.itl)
    metrics = summarize(table, record, warmup_s=0.0, cooldown_s=0.0, slo=SLOTargets())
    for name in ("itl_s", "max_gap_s"):
        dist = metrics[name]
        assert isinstance(dist, dict)
        if dist["max"] is not None:
            assert dist["max"] >= dist["p99"] >= dist["p50"], name
    assert metrics["itl_s"]["max"] == metrics["max_gap_s"]["max"]  # type: ignore[index]
    longest = table["max_gap_s"].max()
    assert metrics["itl_s"]["max"] == (None if math.isnan(longest) else longest)  # type: ignore[index]
