"""The time series reads only the samples around each bin edge, in chunks of steps: the numbers
must be those of np.interp and pandas over every step, bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batchsim.metrics.timeseries as ts
from batchsim.sim.recorder import RunRecord


def _steps(gaps: list[float], durations: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Back-to-back or spaced steps: each starts `gap` after the previous one's end."""
    starts, t = [], 0.0
    for gap, duration in zip(gaps, durations, strict=True):
        t += gap
        starts.append(t)
        t += duration
    return np.array(starts), np.array(starts) + np.array(durations)


_times = st.lists(st.sampled_from([0.0, 0.0, 0.25, 1.0, 3.0]), min_size=1, max_size=40)


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts, "_CHUNK", 3)  # carry running sums across many chunks


@settings(max_examples=300, deadline=None)
@given(times=_times, data=st.data(), bin_s=st.sampled_from([0.25, 1.0, 2.5, 7.0]))
def test_integrals_at_edges_are_np_interp_over_every_sample(times, data, bin_s):
    durations = data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.75]),
                                   min_size=len(times), max_size=len(times)))
    starts, ends = _steps(times, durations)
    values = np.array(data.draw(st.lists(st.integers(0, 9), min_size=len(times),
                                         max_size=len(times))), dtype=np.float64)
    edges = np.arange(int(ends[-1] // bin_s) + 3, dtype=np.float64) * bin_s  # past the end
    integrals = ts._Integrals(edges, starts, ends)
    for signal in (values, 1.0):
        got = integrals(signal)
        expected = ts._integral_at_every_sample(edges, starts, ends, signal)
        assert got.tobytes() == expected.tobytes()


def test_a_step_ending_a_rounding_error_after_the_next_start_is_still_exact():
    """Steps can overlap by an ulp (a recomputed end); an edge there reads every sample."""
    starts = np.array([0.5, 1.0, 1.0 + 1e-9])
    ends = np.array([np.nextafter(1.0, 2.0), 1.0 + 1e-9, 2.0])
    for edges in (np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 0.75, 1.5, 3.0])):
        integrals = ts._Integrals(edges, starts, ends)
        assert (integrals.samples is None) == (1.0 in edges)
        got = integrals(np.array([2.0, 3.0, 5.0]))
        expected = ts._integral_at_every_sample(edges, starts, ends, np.array([2.0, 3.0, 5.0]))
        assert got.tobytes() == expected.tobytes()


def _plain_bin_timeseries(record: RunRecord, bin_s: float, end_s: float) -> pd.DataFrame:
    """Every step's samples in full arrays, per replica, and pandas for the per-bin maximum."""
    steps = record.steps.as_arrays()
    starts = steps["start_s"]
    ends = starts + steps["duration_s"]
    replica = steps["replica"]
    replicas = record.num_replicas
    num_bins = max(1, int(np.ceil(end_s / bin_s)))
    edges = np.arange(num_bins + 1, dtype=np.float64) * bin_s
    kv_fraction = steps["kv_used_blocks"] / record.kv_capacity(replica)
    step_bin = np.minimum((ends // bin_s).astype(np.int64), num_bins - 1)

    def average(values: np.ndarray) -> np.ndarray:
        total = np.zeros(edges.size - 1)
        for r in range(replicas):
            mine = replica == r
            if mine.any():
                total += np.diff(ts._integral_at_every_sample(edges, starts[mine], ends[mine],
                                                              values[mine]))
        return total / np.diff(edges)

    def summed(values: np.ndarray) -> np.ndarray:
        return np.bincount(step_bin, weights=values.astype(float),
                           minlength=num_bins).astype(np.int64)

    t = np.frombuffer(record.occupancy_t, dtype=np.float64)
    n = np.frombuffer(record.occupancy_n, dtype=np.int64).astype(np.float64)
    occupancy_ends = np.append(t[1:], max(end_s, t[-1]))
    kv_max = (pd.Series(kv_fraction).groupby(step_bin).max()
              .reindex(range(num_bins), fill_value=0.0).to_numpy())
    return pd.DataFrame({
        "t_start_s": edges[:-1],
        "busy_fraction": average(np.ones_like(starts)) / replicas,
        "batch_size": average(steps["num_seqs"].astype(float)) / replicas,
        "num_waiting": average(steps["num_waiting"].astype(float)),
        "in_system": np.diff(ts._integral_at_every_sample(edges, t, occupancy_ends, n))
        / np.diff(edges),
        "kv_utilization_mean": average(kv_fraction) / replicas,
        "kv_utilization_max": kv_max,
        "new_tokens": summed(steps["new_tokens"]),
        "output_tokens": summed(steps["emitted_tokens"]),
        "preemptions": summed(steps["preempted"]),
    })


@settings(max_examples=150, deadline=None)
@given(data=st.data(), replicas=st.integers(1, 3), bin_s=st.sampled_from([0.5, 1.0, 4.0]))
def test_bin_timeseries_is_the_plain_computation(data, replicas, bin_s):
    record = RunRecord(kv_blocks_per_replica=32, num_replicas=replicas)
    for r in range(replicas):
        times = data.draw(_times)
        durations = data.draw(st.lists(st.sampled_from([0.125, 0.5, 1.0]), min_size=len(times),
                                       max_size=len(times)))
        starts, _ = _steps(times, durations)
        cut = data.draw(st.integers(0, len(times)))  # some of the steps as one stretch
        for k in range(cut):
            record.steps.append(starts[k], durations[k], r, data.draw(st.integers(1, 4)),
                                data.draw(st.integers(1, 500)), 2, data.draw(st.integers(0, 32)),
                                data.draw(st.integers(0, 3)), data.draw(st.integers(0, 1)))
        if cut < len(times):
            record.steps.extend(start_s=starts[cut:], duration_s=np.array(durations[cut:]),
                                replica=r, num_seqs=3, new_tokens=3, emitted=3,
                                kv_used=np.arange(len(times) - cut) % 33, waiting=1)
    for t in sorted(data.draw(st.lists(st.floats(0.0, 30.0), min_size=1, max_size=10))):
        record.record_occupancy(t, data.draw(st.integers(0, 9)))
    end = float(np.max(record.steps.column("start_s"))) + 2.0
    got = ts.bin_timeseries(record, bin_s, end)
    expected = _plain_bin_timeseries(record, bin_s, end)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    for column in got:
        assert got[column].to_numpy().tobytes() == expected[column].to_numpy().tobytes()
