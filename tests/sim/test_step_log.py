"""The run-length step log gives, column for column, the rows it was given one by one; and the
window statistics read from it are the numbers of the plain per-row formulas, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.metrics.summary import _step_window_stats
from batchsim.sim.recorder import STEP_COLUMNS, RunRecord, StepLog

# A row: start, duration, replica, num_seqs, new_tokens, emitted, kv_used, waiting, preempted.
_small = st.integers(0, 3)
_row = st.tuples(st.floats(0.0, 100.0), st.floats(0.0, 2.0), st.integers(0, 2), _small,
                 _small, _small, st.integers(0, 50), _small, st.integers(0, 1))
# A stretch: rows with the same replica, batch, tokens and queue (extend).
_stretch = st.tuples(st.lists(st.tuples(st.floats(0.0, 100.0), st.floats(0.0, 2.0),
                                        st.integers(0, 50)), min_size=1, max_size=5),
                     st.integers(0, 2), _small, _small)
_entries = st.lists(st.one_of(_row.map(lambda r: ("row", r)),
                              _stretch.map(lambda s: ("stretch", s))), max_size=25)


def _logged(entries: list[tuple[str, tuple]]) -> tuple[StepLog, list[tuple]]:
    """A log fed `entries`, and the rows it should hold in STEP_COLUMNS order."""
    log, rows = StepLog(), []
    for kind, entry in entries:
        if kind == "row":
            start, duration, replica, seqs, new, emitted, kv, waiting, preempted = entry
            log.append(start, duration, replica, seqs, new, emitted, kv, waiting, preempted)
            rows.append((start, duration, replica, seqs, new, emitted, kv, waiting, preempted))
        else:
            steps, replica, seqs, waiting = entry
            starts, durations, kv = (np.array(c) for c in zip(*steps, strict=True))
            log.extend(start_s=starts, duration_s=durations, replica=replica, num_seqs=seqs,
                       new_tokens=seqs, emitted=seqs, kv_used=kv, waiting=waiting)
            rows += [(s, d, replica, seqs, seqs, seqs, k, waiting, 0) for s, d, k in steps]
    return log, rows


@settings(max_examples=200, deadline=None)
@given(entries=_entries)
def test_every_column_has_the_rows_given(entries):
    log, rows = _logged(entries)
    assert len(log) == len(rows)
    expected = dict(zip(STEP_COLUMNS, zip(*rows, strict=True), strict=True)) if rows else {}
    columns = log.as_arrays()
    assert list(columns) == list(STEP_COLUMNS)
    for name in STEP_COLUMNS:
        assert columns[name].tolist() == list(expected.get(name, ())), name
    # a stretch of alike steps is one segment
    assert len(log.segment_rows) <= len(rows)


@settings(max_examples=100, deadline=None)
@given(entries=_entries)
def test_a_stretch_given_as_lists_is_logged_as_one_given_as_arrays(entries):
    """The fast path extends the log with lists; the columns are the same bytes."""
    from_arrays, _ = _logged(entries)
    from_lists = StepLog()
    for kind, entry in entries:
        if kind == "row":
            from_lists.append(*entry)
        else:
            steps, replica, seqs, waiting = entry
            starts, durations, kv = (list(c) for c in zip(*steps, strict=True))
            from_lists.extend(start_s=starts, duration_s=durations, replica=replica,
                              num_seqs=seqs, new_tokens=seqs, emitted=seqs, kv_used=kv,
                              waiting=waiting)
    for name in ("start_s", "duration_s", "kv_used_blocks", "segment_rows", "replica",
                 "num_seqs", "new_tokens", "emitted_tokens", "num_waiting", "preempted"):
        assert getattr(from_lists, name) == getattr(from_arrays, name), name


def test_alike_rows_share_a_segment_and_a_change_starts_one():
    log = StepLog()
    log.extend(start_s=np.array([0.0, 1.0]), duration_s=np.array([1.0, 1.0]), replica=0,
               num_seqs=4, new_tokens=4, emitted=4, kv_used=np.array([10, 11]), waiting=2)
    log.append(2.0, 1.0, 0, 4, 4, 4, 12, 2, 0)  # the stretch's last step: the same segment
    log.append(3.0, 1.0, 0, 5, 300, 4, 40, 1, 0)  # a prefill joins: a new one
    assert log.segment_rows.tolist() == [3, 1]
    assert log.column("new_tokens").tolist() == [4, 4, 4, 300]


def _plain_window_stats(record: RunRecord, start: float, end: float) -> dict[str, float]:
    """The per-row formulas, on fully expanded columns."""
    steps = record.steps.as_arrays()
    s = steps["start_s"]
    e = s + steps["duration_s"]
    overlap = np.clip(np.minimum(e, end) - np.maximum(s, start), 0.0, None)
    span = max(end - start, 1e-12) * record.num_replicas
    busy = overlap.sum()
    kv = steps["kv_used_blocks"] / record.kv_capacity(steps["replica"])
    inside = overlap > 0
    return {
        "gpu_busy_fraction": float(busy / span),
        "kv_mean": float((kv * overlap).sum() / span),
        "kv_max": float(kv[inside].max()) if inside.any() else 0.0,
        "mean_batch_size": float((steps["num_seqs"] * overlap).sum() / busy) if busy else 0.0,
    }


@settings(max_examples=200, deadline=None)
@given(entries=_entries, window=st.tuples(st.floats(0.0, 60.0), st.floats(0.0, 120.0)),
       by_replica=st.booleans())
def test_window_stats_are_the_per_row_numbers(entries, window, by_replica):
    record = RunRecord(kv_blocks_per_replica=64, num_replicas=3)
    if by_replica:
        record.kv_blocks_by_replica = [64, 100, 7]
    record.steps, _ = _logged(entries)
    start, end = min(window), max(window)
    assert _step_window_stats(record, start, end) == _plain_window_stats(record, start, end)
