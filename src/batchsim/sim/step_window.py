"""Step statistics over the measurement window [warmup_s, end], kept exactly as the run goes.

The window's end is the last finish of a measured request (metrics/summary.py: one that
arrived at or after warmup_s and by the last arrival minus cooldown_s), known only once the
run is over. A lower bound of it is known while running (sim/window_bound.py): a request that
has finished, arrived at or after warmup_s and by the latest arrival so far minus cooldown_s
is measured whatever arrives later, so the end is at least its finish. A step that ended by
that bound lies wholly before the end: its seconds in the window are end − max(start,
warmup_s), whatever the end turns out to be, so it is folded into per-replica sums at once
(`_Sums`). Only the steps ending after the bound — a stretch's future steps, those since the
last measured finish the bound knows of, the cool-down and the drain — are kept as rows
(`_Tail`), and counted with the true end when the window is read. Nothing is approximated:
every step's overlap with the window is counted, folded or from its row, and the memory is
the replicas, the distinct token counts of their steps (energy needs the seconds by tokens:
metrics/energy.py), and the tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# A window end read below the bound by at most this (relative) is the rounding of
# warmup_s + window_s, which callers pass for the last measured finish: it is read as the
# bound (the steps up to the bound are folded). A genuinely earlier end is refused.
_ROUNDING = 1e-9


@dataclass(slots=True)
class WindowRows:
    """Steps, one value per row: start, end, replica, batch size, new tokens, KV fraction."""

    start: np.ndarray
    end: np.ndarray
    replica: np.ndarray
    num_seqs: np.ndarray
    new_tokens: np.ndarray
    kv: np.ndarray

    def take(self, rows: np.ndarray) -> WindowRows:
        """The rows where the mask `rows` is true (itself when all are)."""
        if rows.all():
            return self
        return WindowRows(self.start[rows], self.end[rows], self.replica[rows],
                          self.num_seqs[rows], self.new_tokens[rows], self.kv[rows])

    def __len__(self) -> int:
        return int(self.start.size)

    def nbytes(self) -> int:
        return sum(column.nbytes for column in (self.start, self.end, self.replica,
                                                self.num_seqs, self.new_tokens, self.kv))

    @staticmethod
    def empty() -> WindowRows:
        floats, ints = np.zeros(0), np.zeros(0, dtype=np.int64)
        return WindowRows(floats, floats, ints, ints, ints, floats)

    @staticmethod
    def joined(parts: list[WindowRows]) -> WindowRows:
        if len(parts) == 1:
            return parts[0]
        return WindowRows(*(np.concatenate([getattr(p, name) for p in parts])
                            for name in ("start", "end", "replica", "num_seqs", "new_tokens",
                                         "kv")))


@dataclass(slots=True)
class WindowSums:
    """What the window statistics need, over some replicas: busy seconds, batch size ×
    seconds, KV fraction × seconds, the largest KV fraction of a step with seconds in the
    window (0: none), and the busy seconds by a step's new tokens (ascending tokens)."""

    busy_s: float
    batch_s: float
    kv_s: float
    kv_max: float
    tokens: np.ndarray
    seconds_by_tokens: np.ndarray


# Busy seconds by a step's new tokens: the tokens ascending, and the seconds of each. Kept in
# numpy arrays, not a dict: a dict's keys and values are small Python objects made all through
# the run, and the last of them would pin the allocator's arenas of the request objects, which
# are then not returned when the requests are dropped.
Histogram = tuple[np.ndarray, np.ndarray]
_NO_TOKENS: Histogram = (np.zeros(0, dtype=np.int64), np.zeros(0))


def _merged(held: Histogram, more: Histogram) -> Histogram:
    """`held` plus `more`: the union of their tokens, a token in both adding more's seconds
    to held's."""
    (held_tokens, held_seconds), (tokens, seconds) = held, more
    if np.array_equal(held_tokens, tokens):
        return tokens, held_seconds + seconds
    union = np.union1d(held_tokens, tokens)
    total = np.zeros(union.size)
    total[np.searchsorted(union, held_tokens)] = held_seconds
    total[np.searchsorted(union, tokens)] += seconds
    return union, total


@dataclass(slots=True)
class _Sums:
    """Per replica: the sums of `WindowSums`, and its busy seconds by new tokens."""

    busy_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    batch_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kv_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kv_max: np.ndarray = field(default_factory=lambda: np.zeros(0))  # -inf: no step yet
    by_tokens: list[Histogram] = field(default_factory=list)

    def add(self, rows: WindowRows, seconds: np.ndarray) -> None:
        """Add steps with these seconds (≥ 0) in the window: a row of none adds nothing (not
        even to the KV maximum). Each sum adds in row order."""
        if not len(rows):
            return
        replica = rows.replica
        low, high = int(replica.min()), int(replica.max())
        self._grow(high + 1)
        if low == high:  # one replica's steps (always, with one replica): plain sums
            self._add_one(low, rows, seconds)
            return
        replicas = self.busy_s.size
        self.busy_s += np.bincount(replica, weights=seconds, minlength=replicas)
        self.batch_s += np.bincount(replica, weights=rows.num_seqs * seconds,
                                    minlength=replicas)
        self.kv_s += np.bincount(replica, weights=rows.kv * seconds, minlength=replicas)
        inside = seconds > 0
        np.maximum.at(self.kv_max, replica[inside], rows.kv[inside])
        keys, key_seconds = _seconds_by_key(rows.new_tokens * replicas + replica, seconds)
        tokens, key_replica = np.divmod(keys, replicas)
        for r in np.unique(key_replica).tolist():
            mine = key_replica == r
            self.by_tokens[r] = _merged(self.by_tokens[r], (tokens[mine], key_seconds[mine]))

    def _add_one(self, r: int, rows: WindowRows, seconds: np.ndarray) -> None:
        """`add` for steps of replica r alone."""
        self.busy_s[r] += np.add.reduce(seconds)
        self.batch_s[r] += np.add.reduce(rows.num_seqs * seconds)
        self.kv_s[r] += np.add.reduce(rows.kv * seconds)
        self.kv_max[r] = max(self.kv_max[r], rows.kv.max(where=seconds > 0, initial=-np.inf))
        self.by_tokens[r] = _merged(self.by_tokens[r], _seconds_by_key(rows.new_tokens, seconds))

    def copy(self) -> _Sums:
        """A copy to add to (the histograms are never changed in place: shared)."""
        return _Sums(self.busy_s.copy(), self.batch_s.copy(), self.kv_s.copy(),
                     self.kv_max.copy(), list(self.by_tokens))

    def over(self, replicas: range) -> WindowSums:
        """The sums over `replicas`, added in replica order."""
        mine = [r for r in replicas if r < self.busy_s.size]
        kv_max = max((float(self.kv_max[r]) for r in mine), default=-math.inf)
        by_tokens = _NO_TOKENS
        for r in mine:
            by_tokens = _merged(by_tokens, self.by_tokens[r])
        return WindowSums(
            busy_s=_in_order(self.busy_s, mine), batch_s=_in_order(self.batch_s, mine),
            kv_s=_in_order(self.kv_s, mine), kv_max=kv_max if kv_max > -math.inf else 0.0,
            tokens=by_tokens[0], seconds_by_tokens=by_tokens[1])

    def nbytes(self) -> int:
        histograms = sum(tokens.nbytes + seconds.nbytes for tokens, seconds in self.by_tokens)
        return 32 * self.busy_s.size + histograms

    def _grow(self, replicas: int) -> None:
        pad = replicas - self.busy_s.size
        if pad <= 0:
            return
        self.busy_s = np.append(self.busy_s, np.zeros(pad))
        self.batch_s = np.append(self.batch_s, np.zeros(pad))
        self.kv_s = np.append(self.kv_s, np.zeros(pad))
        self.kv_max = np.append(self.kv_max, np.full(pad, -math.inf))
        self.by_tokens += [_NO_TOKENS] * pad


def _seconds_by_key(keys: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys (ascending) of the rows with seconds, and the seconds of each, summed in row
    order.

    Keys (replica and tokens) mostly span a few thousand values, where a bincount over the
    span is far cheaper than sorting the rows; a wider span is sorted (np.unique)."""
    low = int(keys.min())
    if int(keys.max()) - low < 4 * keys.size + 4096:
        totals = np.bincount(keys - low, weights=seconds)
        present = np.flatnonzero(totals > 0)
        return present + low, totals[present]
    distinct, key = np.unique(keys, return_inverse=True)
    totals = np.bincount(key, weights=seconds)
    counted = totals > 0
    return distinct[counted], totals[counted]


def _in_order(values: np.ndarray, replicas: list[int]) -> float:
    total = 0.0
    for r in replicas:
        total += float(values[r])
    return total


@dataclass(slots=True)
class _Tail:
    """The steps that ended after the bound, as rows."""

    parts: list[WindowRows] = field(default_factory=list)
    earliest_end: float = math.inf

    def keep(self, rows: WindowRows) -> None:
        if len(rows):
            self.parts.append(rows)
            self.earliest_end = min(self.earliest_end, float(rows.end.min()))

    def release(self, bound: float) -> WindowRows:
        """Remove and return the rows that ended by `bound` (a pass over the tail only when
        some did)."""
        if bound < self.earliest_end:
            return WindowRows.empty()
        rows = WindowRows.joined(self.parts)
        later = rows.end > bound
        self.parts, self.earliest_end = [], math.inf
        self.keep(rows.take(later))
        return rows.take(~later)

    def rows(self) -> WindowRows:
        if not self.parts:
            return WindowRows.empty()
        rows = WindowRows.joined(self.parts)
        self.parts = [rows]
        return rows

    def nbytes(self) -> int:
        return sum(part.nbytes() for part in self.parts)


class StepWindow:
    """The window's per-replica sums: the folded steps' plus, when read, the tail's."""

    __slots__ = ("_folded", "_folded_to", "_tail", "start_s")

    def __init__(self, start_s: float) -> None:
        self.start_s = start_s
        self._folded = _Sums()
        self._folded_to = start_s  # every step that ended by this is in `_folded`
        self._tail = _Tail()

    def add(self, rows: WindowRows, bound: float) -> None:
        """Fold the steps that ended by `bound` (a lower bound of the window's end, never
        falling), this chunk's and the tail's; keep the rest as rows."""
        self._folded_to = max(self._folded_to, bound)
        bound = self._folded_to
        later = rows.end > bound
        self._fold(rows, later)
        if later.any():
            self._tail.keep(rows.take(later))
        released = self._tail.release(bound)
        if len(released):
            self._fold(released, None)

    def sums(self, end: float, replicas: range) -> WindowSums:
        """The sums over `replicas` of the window [start_s, end] (end at or after the bound)."""
        if end < self._folded_to:
            if self._folded_to - end > _ROUNDING * max(1.0, abs(end)):
                raise ValueError(f"the window's end {end!r} is before {self._folded_to!r}, "
                                 "the finish of a request already known to be measured")
            end = self._folded_to
        rows = self._tail.rows()
        seconds = np.minimum(rows.end, end) - np.maximum(rows.start, self.start_s)
        total = self._folded.copy()
        total.add(rows, np.maximum(seconds, 0.0, out=seconds))
        return total.over(replicas)

    def nbytes(self) -> int:
        return self._folded.nbytes() + self._tail.nbytes()

    def _fold(self, rows: WindowRows, later: np.ndarray | None) -> None:
        """Steps that ended by the window's end (but the `later` ones, which add nothing):
        their seconds after its start."""
        seconds = rows.end - np.maximum(rows.start, self.start_s)
        np.maximum(seconds, 0.0, out=seconds)
        if later is not None:
            seconds[later] = 0.0
        self._folded.add(rows, seconds)
