"""Engine steps as flat growable arrays, stored run-length: the buffer the run's step statistics
are folded from (sim/step_stats.py), a chunk of steps at a time."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# The step log's columns. Start, duration and KV use change every step and are kept per row;
# the others repeat over the steps of a fast-path stretch and are kept once per segment
# (consecutive rows that agree on all of them).
STEP_COLUMNS = ("start_s", "duration_s", "replica", "num_seqs", "new_tokens", "emitted_tokens",
                "kv_used_blocks", "num_waiting", "preempted")
_ROW_COLUMNS = ("start_s", "duration_s", "kv_used_blocks")
_SEGMENT_COLUMNS = ("replica", "num_seqs", "new_tokens", "emitted_tokens", "num_waiting",
                    "preempted")


# Columns are appended from arrays or from lists: the fast path's stretches and the steps'
# batches are a few dozen values, where converting a list through numpy costs more than the
# copy. (Request ids fit 32 bits: 2³¹ requests would be terabytes of request objects.)
Ints = Sequence[int] | np.ndarray
Floats = Sequence[float] | np.ndarray


# numpy's own types for the columns' typecodes: "q" would be numpy's longlong, equal to int64
# but another loop type, which makes ufunc.at take its slow path.
_DTYPES = {"d": np.float64, "i": np.int32, "q": np.int64}


def as_numpy(column: array) -> np.ndarray:
    """A view of a column as a numpy array (the column cannot grow while it is held)."""
    return np.frombuffer(column, dtype=_DTYPES[column.typecode])


def extend_column(column: array, values: Ints | Floats) -> None:
    """Append `values` to `column`, converted to its type."""
    if type(values) is list:  # the usual case, tested first; `fromlist` copies in C
        column.fromlist(values)
    elif isinstance(values, np.ndarray):
        column.frombytes(values.astype(column.typecode, copy=False).tobytes())
    else:
        column.fromlist(list(values))


@dataclass(slots=True)
class StepLog:
    """One row per engine step, over all replicas, stored run-length: a fast-path stretch of a
    thousand steps costs a thousand starts, durations and KV counts, but its batch size,
    tokens, queue and replica once. `column(name)` gives any column with one value per row.

    When it holds `capacity` rows it calls `drain` (a plain log never does): a log that feeds
    running statistics folds its rows into them there and empties itself, so that it holds one
    bounded chunk of steps, never the run's.
    """

    # One value per row. (A KV pool of 2³¹ blocks would be petabytes: 32 bits hold any.)
    start_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    kv_used_blocks: array = field(default_factory=lambda: array("i"))
    # One value per segment, and the segment's number of rows.
    segment_rows: array = field(default_factory=lambda: array("i"))
    replica: array = field(default_factory=lambda: array("i"))
    num_seqs: array = field(default_factory=lambda: array("i"))  # sequences with tokens this step
    new_tokens: array = field(default_factory=lambda: array("q"))
    emitted_tokens: array = field(default_factory=lambda: array("i"))
    num_waiting: array = field(default_factory=lambda: array("i"))
    preempted: array = field(default_factory=lambda: array("i"))
    capacity: int = sys.maxsize
    # The last segment's values, to tell whether the next rows continue it.
    _last_segment: tuple[int, ...] | None = field(default=None, init=False, repr=False)

    def append(
        self, start: float, duration: float, replica: int, num_seqs: int, new_tokens: int,
        emitted: int, kv_used: int, waiting: int, preempted: int,
    ) -> None:
        self.start_s.append(start)
        self.duration_s.append(duration)
        self.kv_used_blocks.append(kv_used)
        self._add_rows(1, (replica, num_seqs, new_tokens, emitted, waiting, preempted))
        if len(self.start_s) >= self.capacity:
            self.drain()

    def extend(
        self, *, start_s: Floats, duration_s: Floats, replica: int, num_seqs: int,
        new_tokens: int, emitted: int, kv_used: Ints, waiting: int,
    ) -> None:
        """Append one row per element of `start_s`; scalars repeat, no preemptions."""
        extend_column(self.start_s, start_s)
        extend_column(self.duration_s, duration_s)
        extend_column(self.kv_used_blocks, kv_used)
        self._add_rows(len(start_s), (replica, num_seqs, new_tokens, emitted, waiting, 0))
        if len(self.start_s) >= self.capacity:
            self.drain()

    def drain(self) -> None:
        """Called when the log holds `capacity` rows (see the class)."""

    def _add_rows(self, count: int, values: tuple[int, ...]) -> None:
        """Count `count` rows with these per-segment values: more rows of the last segment
        when they agree with it, else a new segment."""
        if values == self._last_segment:
            self.segment_rows[-1] += count
            return
        self.segment_rows.append(count)
        # _SEGMENT_COLUMNS, unrolled: a new segment starts at about a third of all events.
        replica, num_seqs, new_tokens, emitted, waiting, preempted = values
        self.replica.append(replica)
        self.num_seqs.append(num_seqs)
        self.new_tokens.append(new_tokens)
        self.emitted_tokens.append(emitted)
        self.num_waiting.append(waiting)
        self.preempted.append(preempted)
        self._last_segment = values

    def __len__(self) -> int:
        return len(self.start_s)

    def segment_column(self, name: str) -> np.ndarray:
        """A per-segment column, one value per segment (a view: do not keep it while logging)."""
        assert name in _SEGMENT_COLUMNS, name
        return as_numpy(getattr(self, name))

    def per_row(self, per_segment: np.ndarray) -> np.ndarray:
        """Repeat one value per segment (e.g. a function of `segment_column`) over its rows."""
        return np.repeat(per_segment, np.frombuffer(self.segment_rows, dtype=np.int32))

    def column(self, name: str) -> np.ndarray:
        """One value per row. The per-row columns are views of the log (free, but the log
        cannot grow while one is held); the per-segment ones are expanded (a new array)."""
        if name in _ROW_COLUMNS:
            return as_numpy(getattr(self, name))
        return self.per_row(self.segment_column(name))

    def clear(self) -> None:
        """Forget every row (new columns: views of the old ones stay valid)."""
        for name in (*_ROW_COLUMNS, "segment_rows", *_SEGMENT_COLUMNS):
            setattr(self, name, array(getattr(self, name).typecode))
        self._last_segment = None

    def nbytes(self) -> int:
        """Bytes of the columns' values."""
        return sum(len(column) * column.itemsize for column in (
            getattr(self, name) for name in (*_ROW_COLUMNS, "segment_rows", *_SEGMENT_COLUMNS)))
