"""The run-length step log gives, column for column, the rows it was given one by one, and asks
to be drained each time it holds its capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.sim.step_log import STEP_COLUMNS, StepLog

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
    for name in STEP_COLUMNS:
        assert log.column(name).tolist() == list(expected.get(name, ())), name
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


class _Chunks(StepLog):
    """A log that hands its rows on in chunks, as the run's step statistics do."""

    __slots__ = ("chunks",)

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity=capacity)
        self.chunks: list[list[tuple]] = []

    def drain(self) -> None:
        self.chunks.append(list(zip(*(self.column(n).tolist() for n in STEP_COLUMNS),
                                    strict=True)))
        self.clear()


@settings(max_examples=200, deadline=None)
@given(entries=_entries, capacity=st.integers(1, 6))
def test_a_drained_log_hands_on_every_row_once_in_order(entries, capacity):
    log = _Chunks(capacity)
    _, rows = _logged(entries)
    for kind, entry in entries:
        if kind == "row":
            log.append(*entry)
        else:
            steps, replica, seqs, waiting = entry
            starts, durations, kv = (list(c) for c in zip(*steps, strict=True))
            log.extend(start_s=starts, duration_s=durations, replica=replica, num_seqs=seqs,
                       new_tokens=seqs, emitted=seqs, kv_used=kv, waiting=waiting)
        assert len(log) < capacity  # drained as soon as it held its capacity
    handed = [row for chunk in log.chunks for row in chunk]
    left = list(zip(*(log.column(n).tolist() for n in STEP_COLUMNS), strict=True))
    assert handed + left == [tuple(r) for r in rows]
    assert all(len(chunk) >= capacity for chunk in log.chunks)
