"""What a run keeps of its steps: running statistics, not a row per step (docs/performance.md,
"What a run keeps").

The engine appends steps to `StepStats` as to a step log; every `DRAIN_ROWS` rows (and
whenever a statistic is read) the chunk is folded into

- the time series' bins (sim/time_bins.py), from time 0 at the experiment's bin width;
- the measurement window's exact per-replica sums (sim/step_window.py), whose end is bounded
  from below by the requests that finished (sim/window_bound.py: `request_arrived`,
  `request_finished`);
- whole-run totals (busy seconds, tokens, preemptions);

and forgotten. The occupancy trace (requests in the system) goes to the bins the same way,
an interval per change. Memory is then the bins, the replicas and the window's tail, however
many steps the run takes; the inter-token gaps (sim/recorder.py `ITLLog`) are still kept,
since exact ITL percentiles need every gap.

The bin width and the window's warm-up and cool-down must be known before the run
(`Measurement`): the statistics read later refuse another window.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from batchsim.sim.step_log import StepLog
from batchsim.sim.step_window import StepWindow, WindowRows, WindowSums
from batchsim.sim.time_bins import BinnedSeries, TimeBins
from batchsim.sim.window_bound import WindowBound

# Rows folded at a time: a chunk's temporaries (a few dozen arrays of this length) stay in the
# core's cache, and numpy's per-call cost is spread over enough rows to vanish.
DRAIN_ROWS = 1 << 15


@dataclass(frozen=True, slots=True)
class Measurement:
    """What the run's statistics are kept for: the time-series bin width and the window's
    warm-up and cool-down (the experiment's `output.timeseries_bin_s`, `warmup_s`,
    `cooldown_s`)."""

    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    bin_s: float = 1.0


@dataclass(slots=True)
class StepTotals:
    """Over every step of the run: how many, busy seconds (all replicas), tokens computed and
    emitted, preemptions. Sums over chunks in the order the chunks came."""

    steps: int = 0
    busy_s: float = 0.0
    new_tokens: int = 0
    emitted_tokens: int = 0
    preempted: int = 0


def _unit_capacity(replica: np.ndarray) -> np.ndarray:
    return np.ones(replica.shape)


@dataclass(slots=True)
class StepStats(StepLog):
    """The step log's interface (`append`, `extend`) over running statistics; see the module.

    `kv_capacity(replica)` gives the KV blocks of each row's replica (RunRecord.kv_capacity),
    read when a chunk is folded: after the simulation is built, before any step.
    """

    measurement: Measurement = field(default_factory=Measurement)
    kv_capacity: Callable[[np.ndarray], np.ndarray] = _unit_capacity
    capacity: int = DRAIN_ROWS
    bins: TimeBins = field(init=False)
    window: StepWindow = field(init=False)
    bound: WindowBound = field(init=False)
    totals_so_far: StepTotals = field(default_factory=StepTotals, init=False)
    # Occupancy: the last change (time, requests in system), and the intervals of the earlier
    # ones not yet binned.
    _occupancy_t: float = field(default=math.nan, init=False)
    _occupancy_n: int = field(default=0, init=False)
    _occupancy_from: array = field(default_factory=lambda: array("d"), init=False)
    _occupancy_to: array = field(default_factory=lambda: array("d"), init=False)
    _occupancy_count: array = field(default_factory=lambda: array("q"), init=False)

    def __post_init__(self) -> None:
        measurement = self.measurement
        self.bins = TimeBins(measurement.bin_s)
        self.window = StepWindow(measurement.warmup_s)
        self.bound = WindowBound(measurement.warmup_s, measurement.cooldown_s)

    # --- recording ----------------------------------------------------------------------------

    def request_arrived(self, arrival_s: float) -> None:
        self.bound.arrived(arrival_s)

    def request_finished(self, arrival_s: float, finish_s: float) -> None:
        """A request finished (not rejected): it may bound the window's end from below."""
        self.bound.finished(arrival_s, finish_s)

    def record_occupancy(self, now: float, in_system: int) -> None:
        """Requests in the system from `now` on; a second change at the same time replaces
        the first."""
        if now != self._occupancy_t:
            if not math.isnan(self._occupancy_t):
                self._occupancy_from.append(self._occupancy_t)
                self._occupancy_to.append(now)
                self._occupancy_count.append(self._occupancy_n)
                if len(self._occupancy_from) >= self.capacity:
                    self._drain_occupancy()
            self._occupancy_t = now
        self._occupancy_n = in_system

    def drain(self) -> None:
        """Fold the logged steps into the statistics and empty the log."""
        if not len(self):
            return
        start, duration = self.column("start_s"), self.column("duration_s")
        end = start + duration
        replica = self.column("replica")
        kv = self.column("kv_used_blocks") / self._capacity()
        num_seqs, new_tokens = self.column("num_seqs"), self.column("new_tokens")
        emitted, preempted = self.column("emitted_tokens"), self.column("preempted")
        self.bins.add_steps(
            start, end, {"busy": None, "batch": num_seqs, "waiting": self.column("num_waiting"),
                         "kv": kv},
            {"new_tokens": new_tokens, "output_tokens": emitted, "preemptions": preempted}, kv)
        self.window.add(WindowRows(start, end, replica, num_seqs, new_tokens, kv),
                        self.bound.current())
        self._add_totals(duration, new_tokens, emitted, preempted)
        self.clear()

    def _capacity(self) -> np.ndarray | float:
        """KV blocks of each row's replica: one number when every replica has the same."""
        capacity = self.kv_capacity(self.segment_column("replica"))
        if capacity.min() == capacity.max():
            return float(capacity[0])
        return self.per_row(capacity)

    def _add_totals(self, duration: np.ndarray, new_tokens: np.ndarray, emitted: np.ndarray,
                    preempted: np.ndarray) -> None:
        totals = self.totals_so_far
        totals.steps += int(duration.size)
        totals.busy_s += float(np.add.reduce(duration))
        totals.new_tokens += int(new_tokens.sum())
        totals.emitted_tokens += int(emitted.sum(dtype=np.int64))
        totals.preempted += int(preempted.sum(dtype=np.int64))

    def _drain_occupancy(self) -> None:
        starts = np.frombuffer(self._occupancy_from, dtype=np.float64)
        ends = np.frombuffer(self._occupancy_to, dtype=np.float64)
        counts = np.frombuffer(self._occupancy_count, dtype=np.int64).astype(np.float64)
        self.bins.add_spans(starts, ends, {"in_system": counts})
        self._occupancy_from, self._occupancy_to = array("d"), array("d")
        self._occupancy_count = array("q")

    def recorded(self) -> bool:
        """Whether any step, occupancy change or request was recorded."""
        return (len(self) > 0 or self.totals_so_far.steps > 0
                or not math.isnan(self._occupancy_t) or self.bound.seen_arrival())

    # --- reading ------------------------------------------------------------------------------

    def check_window(self, warmup_s: float, cooldown_s: float) -> None:
        """Refuse a window other than the one the statistics were kept for."""
        kept = (self.measurement.warmup_s, self.measurement.cooldown_s)
        if (warmup_s, cooldown_s) != kept:
            raise ValueError(f"the run kept its step statistics for warmup_s, cooldown_s = "
                             f"{kept}, not {(warmup_s, cooldown_s)}")

    def window_sums(self, start: float, end: float, replicas: range) -> WindowSums:
        """The window [start, end] of `replicas`; `start` must be the warm-up kept for, `end`
        at or after every finish `request_finished` gave of a request known to be measured."""
        if start != self.measurement.warmup_s:
            raise ValueError(f"the run kept its window statistics from "
                             f"{self.measurement.warmup_s!r} s, not {start!r} s")
        self.drain()
        return self.window.sums(end, replicas)

    def series(self, end_s: float) -> BinnedSeries:
        """The time series' bins from 0 to `end_s` (the last event of the run); the occupancy
        after its last change lasts until `end_s`."""
        self.drain()
        self._drain_occupancy()
        table = self.bins.table(end_s)
        if not math.isnan(self._occupancy_t):
            table.add_span("in_system", self._occupancy_t, end_s, float(self._occupancy_n))
        return table

    def totals(self) -> StepTotals:
        self.drain()
        return self.totals_so_far

    def nbytes(self) -> int:
        """Bytes of what is kept: the chunk not yet folded, the bins, the window's sums, its
        bound and its tail (a test's measure of growth; Python objects' overhead aside)."""
        occupancy = 24 * len(self._occupancy_from)
        return (StepLog.nbytes(self) + occupancy + self.bins.nbytes() + self.window.nbytes()
                + self.bound.nbytes())
