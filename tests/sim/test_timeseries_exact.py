"""The time series binned as the run goes (sim/time_bins.py) is the brute-force binning of the
full list of steps and occupancy changes: every step's seconds in every bin, its tokens and KV
use in the bin its end falls in, at the width the merge rule gives — however the steps came
(one by one or as stretches, replicas interleaved, a stretch's future steps first), however
often the log was drained, and however often the bins merged.

With times, widths and KV fractions that are multiples of 1/8 every sum is exact, so the
numbers must be the same bytes; with arbitrary floats, the same up to the order of the sums.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batchsim.sim.time_bins as time_bins
from batchsim.metrics.timeseries import bin_timeseries
from batchsim.sim.recorder import RunRecord
from batchsim.sim.step_stats import Measurement

# A step: start, duration, replica, num_seqs, new_tokens, emitted, kv_used, waiting, preempted.
Step = tuple[float, float, int, int, int, int, int, int, int]


def _replica_steps(data: st.DataObject, replica: int, times: st.SearchStrategy[float],
                   durations: st.SearchStrategy[float]) -> list[tuple[str, list[Step]]]:
    """One replica's steps in time order, in entries: a lone step ("step") or a stretch
    ("stretch": rows agreeing on all but start, duration and KV, no preemption)."""
    entries: list[tuple[str, list[Step]]] = []
    t = 0.0
    for _ in range(data.draw(st.integers(0, 8))):
        stretch = data.draw(st.booleans())
        rows = data.draw(st.integers(1, 4)) if stretch else 1
        seqs, new, emitted = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 300)),
                              data.draw(st.integers(0, 4)))
        waiting = data.draw(st.integers(0, 3))
        steps: list[Step] = []
        for _ in range(rows):
            t += data.draw(times)
            duration = data.draw(durations)
            preempted = 0 if stretch else data.draw(st.integers(0, 1))
            steps.append((t, duration, replica, seqs, new, emitted, data.draw(st.integers(0, 32)),
                          waiting, preempted))
            t += duration
        entries.append(("stretch" if stretch else "step", steps))
    return entries


def _record_steps(record: RunRecord, data: st.DataObject,
                  per_replica: list[list[tuple[str, list[Step]]]]) -> list[Step]:
    """Record the replicas' entries interleaved in a drawn order; the steps recorded."""
    queues = [list(entries) for entries in per_replica]
    recorded: list[Step] = []
    while any(queues):
        replica = data.draw(st.sampled_from([r for r, q in enumerate(queues) if q]))
        kind, steps = queues[replica].pop(0)
        if kind == "step":
            record.steps.append(*steps[0])
        else:
            columns = list(zip(*steps, strict=True))
            as_lists = data.draw(st.booleans())
            record.steps.extend(
                start_s=list(columns[0]) if as_lists else np.array(columns[0]),
                duration_s=list(columns[1]) if as_lists else np.array(columns[1]),
                replica=replica, num_seqs=steps[0][3], new_tokens=steps[0][4],
                emitted=steps[0][5], kv_used=list(columns[6]), waiting=steps[0][7])
        recorded += steps
    return recorded


def _occupancy(record: RunRecord, data: st.DataObject,
               times: st.SearchStrategy[float]) -> list[tuple[float, int]]:
    """Occupancy changes in time order (a second at the same time replaces the first)."""
    changes: list[tuple[float, int]] = []
    t = 0.0
    for _ in range(data.draw(st.integers(0, 8))):
        t += data.draw(times)
        n = data.draw(st.integers(0, 9))
        record.record_occupancy(t, n)
        if changes and changes[-1][0] == t:
            changes[-1] = (t, n)
        else:
            changes.append((t, n))
    return changes


def _width(bin_s: float, steps: list[Step], occupancy: list[tuple[float, int]],
           end_s: float, max_bins: int) -> float:
    """The merge rule: the width doubles until every step's end (an instant), every
    occupancy interval's end and the run's end (the ends of intervals) lie in the first
    `max_bins` bins."""
    instants = [step[0] + step[1] for step in steps]
    intervals = [t for t, _ in occupancy[1:]] + [end_s]
    width = bin_s
    while (any(_bin(t, width) >= max_bins for t in instants)
           or any(_last_bin(t, width) >= max_bins for t in intervals)):
        width *= 2
    return width


def _edges(width: float, end_s: float) -> np.ndarray:
    num_bins = max(1, _last_bin(end_s, width) + 1)
    return np.arange(num_bins + 1, dtype=np.float64) * width


def _bin(t: float, width: float) -> int:
    """The bin of a time by the table's rounded edges (a search, not a division)."""
    edges = np.arange(int(t / width) + 3, dtype=np.float64) * width
    return int(np.searchsorted(edges, t, side="right")) - 1


def _last_bin(t: float, width: float) -> int:
    k = _bin(t, width)
    return k - 1 if k * width == t else k


def _brute_force(steps: list[Step], occupancy: list[tuple[float, int]], capacity: list[float],
                 replicas: int, edges: np.ndarray, end_s: float) -> pd.DataFrame:
    """Every step against every bin, in plain Python; per bin, math.fsum of the pieces."""
    num_bins = edges.size - 1
    pieces: dict[str, list[list[float]]] = {name: [[] for _ in range(num_bins)]
                                            for name in ("busy", "batch", "waiting", "kv",
                                                         "in_system")}
    kv_max = [0.0] * num_bins
    counts = {name: [0] * num_bins for name in ("new", "emitted", "preempted")}

    def held(start: float, end: float, values: dict[str, float]) -> None:
        for k in range(num_bins):
            seconds = min(end, edges[k + 1]) - max(start, edges[k])
            if seconds > 0:
                for name, value in values.items():
                    pieces[name][k].append(value * seconds)

    for start, duration, replica, seqs, new, emitted, kv_used, waiting, preempted in steps:
        end = start + duration
        kv = kv_used / capacity[replica]
        held(start, end, {"busy": 1.0, "batch": seqs, "waiting": waiting, "kv": kv})
        k = min(_bin(end, edges[1]), num_bins - 1)
        kv_max[k] = max(kv_max[k], kv)
        counts["new"][k] += new
        counts["emitted"][k] += emitted
        counts["preempted"][k] += preempted
    ends = [t for t, _ in occupancy[1:]] + [end_s]  # the last change lasts to the run's end
    for (t, n), t_next in zip(occupancy, ends[:len(occupancy)], strict=True):
        held(t, t_next, {"in_system": float(n)})
    widths = np.diff(edges)
    span = {name: np.array([math.fsum(p) for p in per_bin]) / widths
            for name, per_bin in pieces.items()}
    return pd.DataFrame({
        "t_start_s": edges[:-1],
        "busy_fraction": span["busy"] / replicas,
        "batch_size": span["batch"] / replicas,
        "num_waiting": span["waiting"],
        "in_system": span["in_system"],
        "kv_utilization_mean": span["kv"] / replicas,
        "kv_utilization_max": np.array(kv_max),
        "new_tokens": np.array(counts["new"], dtype=np.int64),
        "output_tokens": np.array(counts["emitted"], dtype=np.int64),
        "preemptions": np.array(counts["preempted"], dtype=np.int64),
    })


_eighths = st.sampled_from([0.0, 0.0, 0.125, 0.25, 1.0, 3.0, 6.5])
_eighth_durations = st.sampled_from([0.0, 0.125, 0.5, 1.0, 1.75, 9.0])


def _run(data: st.DataObject, monkeypatch: pytest.MonkeyPatch, *, replicas: int, bin_s: float,
         times: st.SearchStrategy[float], durations: st.SearchStrategy[float],
         capacity: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The binned table of a drawn run and its brute-force table."""
    max_bins = data.draw(st.sampled_from([time_bins.MAX_BINS, 16, 5, 1]))
    monkeypatch.setattr(time_bins, "MAX_BINS", max_bins)
    record = RunRecord(kv_blocks_per_replica=int(capacity[0]), num_replicas=replicas)
    if len(set(capacity)) > 1:
        record.kv_blocks_by_replica = [int(c) for c in capacity]
    record.measure(Measurement(bin_s=bin_s))
    record.steps.capacity = data.draw(st.sampled_from([1, 2, 3, 1000]))  # drained often
    per_replica = [_replica_steps(data, r, times, durations) for r in range(replicas)]
    steps = _record_steps(record, data, per_replica)
    occupancy = _occupancy(record, data, times)
    last = max([s + d for s, d, *_ in steps] + [t for t, _ in occupancy] + [0.0])
    end_s = max(0.0, last + data.draw(st.sampled_from([0.0, 0.5, 2.0, -1.0, -3.0])))
    got = bin_timeseries(record, end_s)
    edges = _edges(_width(bin_s, steps, occupancy, end_s, max_bins), end_s)
    return got, _brute_force(steps, occupancy, capacity, replicas, edges, end_s)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), replicas=st.integers(1, 3), bin_s=st.sampled_from([0.5, 1.0, 4.0]),
       by_replica=st.booleans())
def test_binned_as_the_run_goes_is_the_brute_force_table_bit_for_bit(data, replicas, bin_s,
                                                                     by_replica):
    capacity = [32.0, 64.0, 8.0][:replicas] if by_replica else [32.0] * replicas
    with pytest.MonkeyPatch.context() as patch:  # MAX_BINS, for this example only
        got, expected = _run(data, patch, replicas=replicas, bin_s=bin_s, times=_eighths,
                             durations=_eighth_durations, capacity=capacity)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    for column in got:
        assert got[column].to_numpy().tobytes() == expected[column].to_numpy().tobytes(), column


@settings(max_examples=100, deadline=None)
@given(data=st.data(), replicas=st.integers(1, 3), bin_s=st.sampled_from([0.1, 0.3, 1.7]))
def test_arbitrary_times_are_the_brute_force_table_up_to_rounding(data, replicas, bin_s):
    floats = st.floats(0.0, 2.0)
    with pytest.MonkeyPatch.context() as patch:  # MAX_BINS, for this example only
        got, expected = _run(data, patch, replicas=replicas, bin_s=bin_s, times=floats,
                             durations=floats, capacity=[64.0, 100.0, 7.0][:replicas])
    assert list(got.columns) == list(expected.columns)
    for column in ("t_start_s", "kv_utilization_max", "new_tokens", "output_tokens",
                   "preemptions"):
        assert got[column].tolist() == expected[column].tolist(), column
    for column in ("busy_fraction", "batch_size", "num_waiting", "in_system",
                   "kv_utilization_mean"):
        np.testing.assert_allclose(got[column], expected[column], rtol=1e-12, atol=1e-12,
                                   err_msg=column)


def test_a_long_run_merges_bins_pairwise_until_it_fits(monkeypatch):
    """3,600 s at 1 ms is 3.6 million bins: merged twice, 4 ms bins, 900,000 of them."""
    record = RunRecord(kv_blocks_per_replica=10)
    record.measure(Measurement(bin_s=0.001))
    record.steps.append(3599.5, 0.25, 0, 2, 100, 2, 5, 0, 0)
    series = bin_timeseries(record, 3600.0)
    assert len(series) == 900_000 <= time_bins.MAX_BINS
    assert series["t_start_s"].iloc[1] == 0.004
    assert series["new_tokens"].sum() == 100
    assert series["busy_fraction"].sum() * 0.004 == pytest.approx(0.25)
    monkeypatch.setattr(time_bins, "MAX_BINS", 3)  # a short run fits at the experiment's width
    record = RunRecord(kv_blocks_per_replica=10)
    record.measure(Measurement(bin_s=1.0))
    record.steps.append(0.5, 2.0, 0, 2, 100, 2, 5, 0, 0)
    assert bin_timeseries(record, 3.0)["t_start_s"].tolist() == [0.0, 1.0, 2.0]


def test_bins_agree_with_the_rounded_edges():
    """0.3 s is below the fourth edge of 0.1 s bins (3 × 0.1 = 0.30000000000000004): bin 2, as
    the table says, and so is 0.7 (below 0.7000000000000001); a time on an edge starts the
    bin."""
    times = np.array([0.0, 0.1, 0.3, 0.30000000000000004, 1.0, 0.7])
    assert time_bins.bins_of(times, 0.1).tolist() == [0, 1, 2, 3, 10, 6]


@settings(max_examples=150, deadline=None)
@given(times=st.lists(st.floats(0.0, 1e6), max_size=40),
       width=st.sampled_from([0.1, 1.0, 1 / 3, 7.3, 1e-3, 60.0]))
def test_bins_of_is_the_search_of_the_rounded_edges(times, width):
    values = np.array(times + [k * width for k in range(5)], dtype=np.float64)
    expected = []
    for t in values.tolist():  # the edges around t, rounded as the table's
        low = max(0, int(t / width) - 2)
        edges = np.arange(low, low + 5, dtype=np.float64) * width
        expected.append(low + int(np.searchsorted(edges, t, side="right")) - 1)
    assert time_bins.bins_of(values, width).tolist() == expected


@settings(max_examples=150, deadline=None)
@given(data=st.data(), ascending=st.booleans())
def test_sums_and_maxima_per_bin_are_add_at_and_maximum_at(data, ascending):
    bins = np.array(data.draw(st.lists(st.integers(0, 5), max_size=30)), dtype=np.int64)
    if ascending:
        bins = np.sort(bins)
    counts = np.array(data.draw(st.lists(st.integers(0, 9), min_size=bins.size,
                                         max_size=bins.size)), dtype=np.int32)
    kv = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=bins.size,
                                     max_size=bins.size)), dtype=np.float64)
    runs = time_bins._runs(bins)
    assert (runs is not None) == (bins.size > 0 and bool((np.diff(bins) >= 0).all()))
    summed, expected_sums = np.zeros(6, dtype=np.int64), np.zeros(6, dtype=np.int64)
    time_bins._add_at(summed, bins, counts, runs)
    np.add.at(expected_sums, bins, counts)
    assert summed.tolist() == expected_sums.tolist()
    largest, expected_max = np.zeros(6), np.zeros(6)
    time_bins._max_at(largest, bins, kv, runs)
    np.maximum.at(expected_max, bins, kv)
    assert largest.tobytes() == expected_max.tobytes()


def test_a_record_measured_twice_or_late_is_refused():
    record = RunRecord()
    record.steps.append(0.0, 1.0, 0, 1, 1, 1, 0, 0, 0)
    with pytest.raises(AssertionError):
        record.measure(Measurement(bin_s=2.0))
