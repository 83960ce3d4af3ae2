"""The time series, binned as the run goes (docs/design.md §6): per-bin sums from time 0.

A signal is either held over intervals — a step's batch size while it runs, the requests in
the system from one change to the next — and a bin then sums value × the seconds of each
interval inside it (the bin's time average is that sum over its width); or counted at
instants — a step's tokens and KV use at its end — and a bin sums them, or keeps the largest.

Bins are `width` wide from time 0, their edges k × width rounded as the table writes them: a
time lies in the bin whose rounded edges hold it, so what the table says is a bin's is exactly
what was added to it. A run reaching past MAX_BINS bins merges neighbouring bins pairwise, and
the width doubles: every other edge of the old bins is an edge of the new ones (2k × width and
k × 2·width round alike), so the merged sums and maxima are those of binning at the doubled
width from the start, up to the order of the additions. The memory is MAX_BINS bins at most,
however long the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

MAX_BINS = 1_000_000
"""At most this many time-series rows. Bins are `timeseries_bin_s` × 2ᵏ wide, with k the fewest
doublings of the width that keep every step, every occupancy change and the run's end within
MAX_BINS bins: whenever a run reaches past the last bin, neighbouring bins merge pairwise."""

# Held over intervals: Σ value × seconds per bin.
SPAN_SIGNALS = ("busy", "batch", "waiting", "kv", "in_system")
# Counted at instants: Σ per bin, exact integers.
COUNT_SIGNALS = ("new_tokens", "output_tokens", "preemptions")


def bins_of(times: np.ndarray, width: float) -> np.ndarray:
    """The bin k with k·width ≤ t < (k + 1)·width, edges rounded as the table's, of each t ≥ 0.

    The rounded quotient's floor is the exact one or one more (a quotient rounded up onto a
    whole number), and a rounded edge may fall either side of a time an ulp away: one
    correction each way makes the bin agree with its edges.
    """
    k = np.floor(times / width)
    k -= k * width > times
    k += (k + 1.0) * width <= times
    return k.astype(np.int64)


def _last_bins(ends: np.ndarray, width: float,
               end_bins: np.ndarray | None = None) -> np.ndarray:
    """The last bin an interval ending at `ends` has seconds in (`end_bins`: the ends' bins,
    if known): an end on an edge is the previous bin's."""
    last = bins_of(ends, width) if end_bins is None else end_bins.copy()
    last -= last * width == ends
    return last


# Pieces of intervals: each piece's bin and seconds, and the interval it came from (None: the
# pieces are the intervals, in order).
Pieces = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def spread(starts: np.ndarray, ends: np.ndarray, width: float,
           end_bins: np.ndarray | None = None) -> list[Pieces]:
    """The intervals [start, end) cut at the bin edges, as groups of pieces, each group's
    bins never falling when the intervals' do not (`end_bins`: the ends' bins, if known).

    A piece's seconds are min(end, its bin's end) − max(start, its bin's start). The first
    group is every interval's piece in its first bin — for an interval inside one bin,
    end − start — and the second the rest of the few intervals that span bins (steps are
    milliseconds, bins seconds). An empty interval has a piece of no seconds.
    """
    first = bins_of(starts, width)
    seconds = np.minimum(ends, (first + 1) * width) - starts
    later = _last_bins(ends, width, end_bins) - first  # pieces after the first
    spanning = np.flatnonzero(later > 0)
    if not spanning.size:
        return [(first, seconds, None)]
    counts = later[spanning]
    rows = np.repeat(spanning, counts)
    bins = first[rows] + 1 + np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    low = bins * width
    cut = np.minimum(ends[rows], (bins + 1) * width) - low
    return [(first, seconds, None), (bins, cut, rows)]


def _runs(bins: np.ndarray) -> np.ndarray | None:
    """Where each run of equal bins starts, when the bins never fall (one replica's steps,
    in order); None when they do."""
    if bins.size and bool((bins[1:] >= bins[:-1]).all()):
        return np.flatnonzero(np.diff(bins, prepend=-1))
    return None


def _add_at(totals: np.ndarray, bins: np.ndarray, values: np.ndarray,
            runs: np.ndarray | None) -> None:
    """totals[bins] += values: a sum per run of bins (`_runs`) where they never fall, else
    `add.at` (values cast first: a mixed-type `add.at` is ten times slower). Either adds in
    an order fixed by the rows."""
    values = values.astype(totals.dtype, copy=False)
    if runs is None:
        np.add.at(totals, bins, values)
    elif runs.size:
        totals[bins[runs]] += np.add.reduceat(values, runs)


def _max_at(largest: np.ndarray, bins: np.ndarray, values: np.ndarray,
            runs: np.ndarray | None) -> None:
    """largest[bins] = max(largest[bins], values), a maximum per run where there are runs."""
    if runs is None:
        np.maximum.at(largest, bins, values)
    elif runs.size:
        run_bins = bins[runs]
        largest[run_bins] = np.maximum(largest[run_bins], np.maximum.reduceat(values, runs))


@dataclass(slots=True)
class BinnedSeries:
    """The bins of a finished run: `edges` (one more than the bins), the span sums (value ×
    seconds), the largest KV fraction of the steps ending in each bin (0: none), and the
    counts."""

    edges: np.ndarray
    spans: dict[str, np.ndarray]
    kv_max: np.ndarray
    counts: dict[str, np.ndarray]

    @property
    def width(self) -> float:
        return float(self.edges[1])

    def add_span(self, name: str, start: float, end: float, value: float) -> None:
        """One more interval of a span signal; its seconds after the last edge are outside."""
        end = min(end, float(self.edges[-1]))
        if end > start:
            for bins, seconds, _ in spread(np.array([start]), np.array([end]), self.width):
                _add_at(self.spans[name], bins, seconds * value, None)


class TimeBins:
    """Per-bin sums of the span and count signals and the per-bin KV maximum, from time 0.

    Arrays grow by a quarter at a time up to MAX_BINS; `size` is the number of bins reached
    so far.
    """

    __slots__ = ("counts", "kv_max", "size", "spans", "width")

    def __init__(self, bin_s: float) -> None:
        self.width = float(bin_s)
        self.size = 0
        self.spans = {name: np.zeros(0) for name in SPAN_SIGNALS}
        self.kv_max = np.zeros(0)
        self.counts = {name: np.zeros(0, dtype=np.int64) for name in COUNT_SIGNALS}

    def add_steps(self, starts: np.ndarray, ends: np.ndarray,
                  spans: Mapping[str, np.ndarray | None], counts: Mapping[str, np.ndarray],
                  kv: np.ndarray) -> None:
        """Steps running over [starts, ends): the span signals while they run (None: the
        value 1, the busy seconds themselves); the counts and the KV fraction at their end."""
        if not starts.size:
            return
        self._reach(float(ends.max()), interval_end=False)
        end_bins = bins_of(ends, self.width)
        runs = _runs(end_bins)
        for name, values in counts.items():
            _add_at(self.counts[name], end_bins, values, runs)
        _max_at(self.kv_max, end_bins, kv, runs)
        self._add_pieces(spread(starts, ends, self.width, end_bins), spans)

    def add_spans(self, starts: np.ndarray, ends: np.ndarray,
                  values: Mapping[str, np.ndarray | None]) -> None:
        """Add value × seconds in each bin of the intervals [starts, ends) (ends ≥ starts) to
        each named span signal (None: the value 1)."""
        if starts.size:
            self._reach(float(ends.max()), interval_end=True)
            self._add_pieces(spread(starts, ends, self.width), values)

    def _add_pieces(self, groups: list[Pieces], values: Mapping[str, np.ndarray | None]) -> None:
        for bins, seconds, rows in groups:
            runs = _runs(bins)
            for name, value in values.items():
                if value is None:
                    weights = seconds
                else:
                    weights = (value if rows is None else value[rows]) * seconds
                _add_at(self.spans[name], bins, weights, runs)

    def table(self, end_s: float) -> BinnedSeries:
        """The bins from 0 up to the first edge at or after `end_s` (at least one). Steps
        ending later count in the last bin; their seconds after its end are outside the table.

        The arrays are views of the bins (read them before recording more), but those the
        table changes: the counts and maxima folded into the last bin, and the occupancy (the
        caller adds its last interval, `BinnedSeries.add_span`)."""
        self._reach(end_s, interval_end=True)
        num_bins = max(1, int(_last_bins(np.array([end_s]), self.width)[0]) + 1)
        self._grow(num_bins)
        edges = np.arange(num_bins + 1, dtype=np.float64) * self.width
        spans = {name: values[:num_bins] for name, values in self.spans.items()}
        spans["in_system"] = spans["in_system"].copy()
        kv_max = self.kv_max[:num_bins]
        counts = {name: values[:num_bins] for name, values in self.counts.items()}
        if self.size > num_bins:  # fold what ended after the table's end into its last bin
            later = slice(num_bins, self.size)
            kv_max = kv_max.copy()
            kv_max[-1] = max(kv_max[-1], self.kv_max[later].max())
            for name, values in counts.items():
                counts[name] = values = values.copy()
                values[-1] += self.counts[name][later].sum()
        return BinnedSeries(edges, spans, kv_max, counts)

    def nbytes(self) -> int:
        arrays = (*self.spans.values(), self.kv_max, *self.counts.values())
        return sum(values.nbytes for values in arrays)

    def _reach(self, latest: float, *, interval_end: bool) -> None:
        """Make room for a time (an instant's, or an interval's end): merge bins until it lies
        within MAX_BINS of them, then grow the arrays to its bin."""
        latest_array = np.array([latest])
        while True:
            bins = _last_bins if interval_end else bins_of
            last = int(bins(latest_array, self.width)[0])
            if last < MAX_BINS:
                break
            self._merge()
        self._grow(last + 1)

    def _grow(self, num_bins: int) -> None:
        self.size = max(self.size, num_bins)
        if num_bins <= self.kv_max.size:
            return
        # A quarter more each time: the copies stay linear in the bins, the slack small.
        size = self.kv_max.size
        capacity = max(num_bins, min(size + size // 4 + 1024, MAX_BINS))
        pad = capacity - self.kv_max.size
        for signals in (self.spans, self.counts):
            for name, values in signals.items():
                signals[name] = np.concatenate((values, np.zeros(pad, dtype=values.dtype)))
        self.kv_max = np.concatenate((self.kv_max, np.zeros(pad)))

    def _merge(self) -> None:
        """Neighbouring bins merged pairwise: sums added, maxima kept, the width doubled."""
        def pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if values.size % 2:
                values = np.append(values, np.zeros(1, dtype=values.dtype))
            return values[0::2], values[1::2]

        for signals in (self.spans, self.counts):
            for name, values in signals.items():
                even, odd = pairs(values)
                signals[name] = even + odd
        self.kv_max = np.maximum(*pairs(self.kv_max))
        self.size = (self.size + 1) // 2
        self.width *= 2.0
