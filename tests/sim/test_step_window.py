"""The measurement window's sums kept as the run goes (sim/step_window.py) are the brute-force
sums over the full list of steps with the true window [warmup_s, end], where end is the last
finish of a measured request — known only at the end, bounded from below while running by the
requests that finished. However the steps, arrivals and finishes interleave, however often the
log is drained: with times and KV fractions in multiples of 1/8 every sum is exact, so the
numbers must be equal."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.metrics.summary import _step_window_stats
from batchsim.metrics.transfer import pool_step_stats
from batchsim.sim.recorder import RunRecord
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_stats import Measurement

_eighths = st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0, 2.5])
# A step: start, duration, replica, num_seqs, new_tokens, kv_used (of 32 blocks).
Step = tuple[float, float, int, int, int, int]


def _steps(data: st.DataObject, replicas: int) -> list[Step]:
    steps: list[Step] = []
    for replica in range(replicas):
        t = 0.0
        for _ in range(data.draw(st.integers(0, 12))):
            t += data.draw(_eighths)
            duration = data.draw(_eighths)
            steps.append((t, duration, replica, data.draw(st.integers(1, 4)),
                          data.draw(st.sampled_from([1, 2, 3, 64, 300])),
                          data.draw(st.integers(0, 32))))
            t += duration
    return steps


def _requests(data: st.DataObject) -> list[Request]:
    """Requests in arrival order, each finished (or rejected) some time after it arrived."""
    requests, t = [], 0.0
    for request_id in range(data.draw(st.integers(0, 10))):
        t += data.draw(_eighths)
        request = Request(request_id, t, 10, 5)
        request.finish_s = t + data.draw(_eighths)
        if data.draw(st.integers(0, 4)) == 0:
            request.reject("test")
        else:
            request.status = RequestStatus.FINISHED
        requests.append(request)
    return requests


def _record(data: st.DataObject, record: RunRecord, steps: list[Step],
            requests: list[Request]) -> None:
    """Feed the steps (in a drawn order, some as stretches of one row), arrivals (in order)
    and finishes (each after its arrival) interleaved."""
    events: list[tuple[str, object]] = [("step", s) for s in steps]
    events = data.draw(st.permutations(events)) if events else []
    arrivals = [("arrive", r) for r in requests]
    for request in requests:  # its finish anywhere after its arrival
        position = data.draw(st.integers(0, len(arrivals)))
        after = next(i for i, (_, r) in enumerate(arrivals) if r is request) + 1
        arrivals.insert(max(position, after), ("done", request))
    merged: list[tuple[str, object]] = []
    while events or arrivals:
        take_step = events and (not arrivals or data.draw(st.booleans()))
        merged.append((events if take_step else arrivals).pop(0))
    for kind, item in merged:
        if kind == "step":
            start, duration, replica, seqs, new, kv = item  # type: ignore[misc]
            if data.draw(st.booleans()):
                record.steps.append(start, duration, replica, seqs, new, 1, kv, 0, 0)
            else:
                record.steps.extend(start_s=[start], duration_s=[duration], replica=replica,
                                    num_seqs=seqs, new_tokens=new, emitted=1, kv_used=[kv],
                                    waiting=0)
        elif kind == "arrive":
            record.add_request(item)  # type: ignore[arg-type]
        else:
            record.request_done(item)  # type: ignore[arg-type]


def _true_end(requests: list[Request], warmup_s: float, cooldown_s: float) -> float:
    """metrics/summary.py's rule: the last finish of a measured request, else warmup_s."""
    if not requests:
        return warmup_s
    latest = max(r.arrival_s for r in requests)
    done = [r.finish_s for r in requests if r.status is RequestStatus.FINISHED
            and warmup_s <= r.arrival_s <= latest - cooldown_s]
    return max(done) if done else warmup_s


def _brute_force(steps: list[Step], capacity: list[float], replicas: range, start: float,
                 end: float) -> dict[str, object]:
    pieces: dict[str, list[float]] = {"busy": [], "batch": [], "kv": []}
    kv_max, by_tokens = 0.0, {}
    for s, d, replica, seqs, new, kv_used in steps:
        if replica not in replicas:
            continue
        seconds = min(s + d, end) - max(s, start)
        if seconds > 0:
            kv = kv_used / capacity[replica]
            pieces["busy"].append(seconds)
            pieces["batch"].append(seqs * seconds)
            pieces["kv"].append(kv * seconds)
            kv_max = max(kv_max, kv)
            by_tokens[new] = by_tokens.get(new, 0.0) + seconds
    return {"busy_s": math.fsum(pieces["busy"]), "batch_s": math.fsum(pieces["batch"]),
            "kv_s": math.fsum(pieces["kv"]), "kv_max": kv_max,
            "tokens": sorted(by_tokens), "seconds": [by_tokens[t] for t in sorted(by_tokens)]}


@settings(max_examples=150, deadline=None)
@given(data=st.data(), replicas=st.integers(1, 3), warmup_s=_eighths,
       cooldown_s=st.sampled_from([0.0, 0.0, 0.5, 2.0]), by_replica=st.booleans())
def test_window_sums_are_the_brute_force_sums_with_the_true_end(data, replicas, warmup_s,
                                                                cooldown_s, by_replica):
    capacity = [32.0, 64.0, 8.0][:replicas] if by_replica else [32.0] * replicas
    record = RunRecord(kv_blocks_per_replica=32, num_replicas=replicas)
    if by_replica:
        record.kv_blocks_by_replica = [int(c) for c in capacity]
    record.measure(Measurement(warmup_s=warmup_s, cooldown_s=cooldown_s))
    record.steps.capacity = data.draw(st.sampled_from([1, 2, 5, 1000]))
    steps, requests = _steps(data, replicas), _requests(data)
    _record(data, record, steps, requests)
    end = _true_end(requests, warmup_s, cooldown_s)
    for mine in [range(replicas), *(range(r, r + 1) for r in range(replicas)), range(1, 3)]:
        got = record.steps.window_sums(warmup_s, end, mine)
        expected = _brute_force(steps, capacity, mine, warmup_s, end)
        assert (got.busy_s, got.batch_s, got.kv_s, got.kv_max) == (
            expected["busy_s"], expected["batch_s"], expected["kv_s"], expected["kv_max"])
        assert got.tokens.tolist() == expected["tokens"]
        assert got.seconds_by_tokens.tolist() == expected["seconds"]
    # Only the steps after what the bound knew are kept as rows.
    window = record.steps.window
    assert (window._tail.rows().end > window._folded_to).all()
    assert window._folded_to <= end


def test_the_bound_folds_the_steps_before_the_last_measured_finish():
    record = RunRecord(kv_blocks_per_replica=10)
    record.measure(Measurement(warmup_s=1.0, cooldown_s=2.0))
    record.steps.capacity = 1
    early, late = Request(0, 1.0, 10, 5), Request(1, 4.0, 10, 5)
    record.add_request(early)
    record.add_request(late)  # arrivals up to 4 s: the early one is measured whatever comes
    early.status, early.finish_s = RequestStatus.FINISHED, 3.0
    record.request_done(early)
    for start in (0.0, 1.0, 2.0, 3.0):  # the last ends after the bound (3 s): kept as a row
        record.steps.append(start, 0.5, 0, 2, 2, 2, 5, 0, 0)
    window = record.steps.window
    assert window._folded_to == 3.0
    assert window._tail.rows().start.tolist() == [3.0]
    stats = _step_window_stats(record, 1.0, 3.0)
    assert stats["gpu_busy_fraction"] == pytest.approx(1.0 / 2.0)  # 0.5 + 0.5 of 2 s
    # warmup + window rounds within an ulp of the end: read as the bound; earlier is refused
    pools = pool_step_stats(record, range(1), 1.0, float(np.nextafter(3.0, 0.0)))
    assert pools["gpu_busy_fraction"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="already known to be measured"):
        record.steps.window_sums(1.0, 2.5, range(1))


def test_another_window_than_the_one_kept_is_refused():
    record = RunRecord(kv_blocks_per_replica=10)
    record.measure(Measurement(warmup_s=5.0, cooldown_s=1.0))
    with pytest.raises(ValueError, match="warmup_s, cooldown_s"):
        record.steps.check_window(5.0, 0.0)
    with pytest.raises(ValueError, match=r"from 5\.0 s"):
        record.steps.window_sums(0.0, 10.0, range(1))
