"""The end-of-run statistics' shortcuts give the numbers of the plain numpy calls they replace,
bit for bit: the stable order of the gaps, the bin of each step, the counts at the bin edges and
the per-bin token sums."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import batchsim.metrics.timeseries as ts
from batchsim.metrics.summary import stable_order
from batchsim.sim.recorder import RunRecord

# Repeated values, both zeros, infinities and NaN: the cases where orders could differ.
_special = st.sampled_from([0.0, -0.0, 0.5, 1.0, 3.0, 1e-300, 5e-324, np.inf, -np.inf, np.nan,
                            -1.5])
_floats = st.one_of(_special, st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_floats, max_size=60))
def test_stable_order_is_numpys_stable_argsort(values):
    array = np.array(values, dtype=np.float64)
    assert stable_order(array).tolist() == np.argsort(array, kind="stable").tolist()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(min_value=0.0, max_value=1e6), max_size=60))
def test_stable_order_of_gaps_keeps_ties_in_index_order(values):
    array = np.array(values + values[::-1], dtype=np.float64)  # every value at least twice
    assert stable_order(array).tolist() == np.argsort(array, kind="stable").tolist()


def _near_multiples(divisor: float) -> st.SearchStrategy[float]:
    """Multiples of the divisor and their neighbours, where a rounded quotient can reach a
    whole number that the exact one does not."""
    def around(k: int, ulps: int) -> float:
        value = k * divisor
        step = np.inf if ulps > 0 else -np.inf
        for _ in range(abs(ulps)):
            value = float(np.nextafter(value, step))
        return value
    return st.builds(around, st.integers(0, 10**6), st.integers(-2, 2))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), divisor=st.sampled_from([0.1, 1.0, 1 / 3, 7.3, 10.0, 1e-3, 2.5e5]))
def test_floor_divide_is_numpys(data, divisor):
    values = data.draw(st.lists(st.one_of(_near_multiples(divisor), _floats,
                                          st.floats(0.0, 1e7)), max_size=40))
    array = np.array(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # ∞ or a huge value // divisor
        expected = np.floor_divide(array, divisor)
        got = ts._floor_divide(array.copy(), divisor)
    assert got.tobytes() == expected.tobytes()


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.25, np.nan]), max_size=30),
       sort=st.booleans())
def test_counts_at_the_edges_sorted_or_not(values, sort):
    array = np.array(sorted(values) if sort else values, dtype=np.float64)
    edges = np.arange(6, dtype=np.float64) * 0.5
    expected = np.array([(array <= edge).sum() for edge in edges])
    assert ts._count_at_or_below(edges, array).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), replicas=st.integers(1, 3), bin_s=st.sampled_from([0.5, 1.0, 4.0]))
def test_token_sums_per_bin_are_the_row_by_row_sums(data, replicas, bin_s):
    """Segments of no rows (an empty stretch), in the middle and at the end, start no run."""
    record = RunRecord(kv_blocks_per_replica=8, num_replicas=replicas)
    t = 0.0
    for _ in range(data.draw(st.integers(1, 25))):
        rows = data.draw(st.integers(0, 4))
        durations = np.full(rows, data.draw(st.sampled_from([0.125, 0.5, 1.0])))
        starts = t + np.cumsum(durations) - durations
        record.steps.extend(start_s=starts, duration_s=durations,
                            replica=data.draw(st.integers(0, replicas - 1)),
                            num_seqs=data.draw(st.integers(1, 4)),
                            new_tokens=data.draw(st.integers(1, 500)),
                            emitted=data.draw(st.integers(0, 4)),
                            kv_used=np.zeros(rows, dtype=np.int64), waiting=0)
        t = float(starts[-1] + durations[-1]) if rows else t
    steps = record.steps
    num_bins = max(1, int(np.ceil((t + 1.0) / bin_s)))
    step_bin = ts._step_bins(record, bin_s, num_bins)
    names = ("new_tokens", "emitted_tokens", "preempted")
    got = ts._summed_by_segment(record, step_bin, names, num_bins)
    for name, sums in zip(names, got, strict=True):
        expected = np.zeros(num_bins, dtype=np.int64)
        np.add.at(expected, step_bin, steps.column(name).astype(np.int64))
        assert sums.dtype == np.int64
        assert sums.tolist() == expected.tolist()


@settings(max_examples=300, deadline=None)
@given(data=st.data(), sort=st.booleans())
def test_max_per_bin_is_maximum_at_from_zeros(data, sort):
    bins = data.draw(st.lists(st.integers(0, 5), max_size=30))
    step_bin = np.array(sorted(bins) if sort else bins, dtype=np.int64)
    values = np.array(data.draw(st.lists(_special, min_size=len(bins), max_size=len(bins))),
                      dtype=np.float64)
    expected = np.zeros(6)
    with np.errstate(invalid="ignore"):  # NaN
        np.maximum.at(expected, step_bin, values)
        got = ts._max_per_bin(step_bin, values, 6)
    assert got.tobytes() == expected.tobytes()
