"""Everything a run records: the request objects, the inter-token gaps (kept as flat growable
arrays, so that memory stays linear), and the step statistics (sim/step_stats.py: running sums,
bounded whatever the number of steps)."""

from __future__ import annotations

import weakref
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from batchsim.sim.kv_fragmentation import FragmentationMeter
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_log import Floats, Ints, extend_column
from batchsim.sim.step_stats import Measurement, StepStats
from batchsim.sim.step_trace import StepTrace

# Request ids per block when spreading each batch run's longest gap over its requests.
_MAX_GAP_BLOCK = 1 << 20


@dataclass(slots=True)
class ITLLog:
    """Every inter-token gap, stored so that memory grows with steps, not with tokens.

    A *run* is a batch of requests that saw the same gaps: each gap of the run was seen once
    by each of its requests (a fast-path stretch, or a step whose batch emitted together).
    Runs are kept flat — all their ids in one array, all their gaps in another, with the end
    offsets of each run — so a run costs bytes, not Python objects. A run of the same requests
    as the run before it (the next stretch of an unchanged batch) only adds its gaps to that
    run: the gaps, their order and who saw them are the same, the ids are stored once. Gaps
    that differ between the requests of a step are kept one by one.
    """

    # Request ids in 32 bits: 2³¹ requests would be terabytes of request objects.
    single_request: array = field(default_factory=lambda: array("i"))
    single_gap: array = field(default_factory=lambda: array("d"))
    run_ids: array = field(default_factory=lambda: array("i"))
    run_gaps: array = field(default_factory=lambda: array("d"))
    run_ids_end: array = field(default_factory=lambda: array("q"))
    run_gaps_end: array = field(default_factory=lambda: array("q"))
    # The last run's ids, to tell whether the next run continues it.
    _last_run_ids: Sequence[int] | None = field(default=None, init=False, repr=False)

    def add_run(self, ids: Ints, gaps: Floats) -> None:
        id_list = ids.tolist() if isinstance(ids, np.ndarray) else ids
        if id_list != self._last_run_ids:  # a new batch: a new run
            extend_column(self.run_ids, id_list)
            self.run_ids_end.append(len(self.run_ids))
            self.run_gaps_end.append(0)  # set below
            self._last_run_ids = list(id_list)
        extend_column(self.run_gaps, gaps)
        self.run_gaps_end[-1] = len(self.run_gaps)

    def add_singles(self, ids: Ints, gaps: Floats) -> None:
        extend_column(self.single_request, ids)
        extend_column(self.single_gap, gaps)

    def _runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each run's end offset into `run_ids`, its request count and its gap count."""
        ids_end = np.frombuffer(self.run_ids_end, dtype=np.int64)
        gaps_end = np.frombuffer(self.run_gaps_end, dtype=np.int64)
        return ids_end, np.diff(ids_end, prepend=0), np.diff(gaps_end, prepend=0)

    def count(self) -> int:
        """Gaps recorded, counting each run's gaps once per request that saw them."""
        _, ids_per_run, gaps_per_run = self._runs()
        return len(self.single_gap) + int(np.dot(ids_per_run, gaps_per_run))

    def _counted_per_run(self, counted: np.ndarray) -> np.ndarray:
        """How many of each run's requests are counted (`counted[request_id]`)."""
        ids_end, ids_per_run, _ = self._runs()
        per_run = np.zeros(ids_end.size, dtype=np.int32)
        nonempty = ids_per_run > 0
        if nonempty.any():
            counted_ids = counted[np.frombuffer(self.run_ids, dtype=np.int32)]
            first = (ids_end - ids_per_run)[nonempty]
            per_run[nonempty] = np.add.reduceat(counted_ids, first, dtype=np.int32)
        return per_run

    def gaps_by_request(self, num_requests: int) -> list[list[float]]:
        """Each request's gaps (ids 0 … num_requests − 1): the gaps it saw alone in the order
        they came, then those of each batch run it was in, in order. The log keeps no clock,
        so where a request's lone and shared gaps interleaved in time is not kept: their
        multiset (every statistic over gaps) is exact, their order only within each kind."""
        gaps: list[list[float]] = [[] for _ in range(num_requests)]
        for request_id, gap in zip(self.single_request, self.single_gap, strict=True):
            gaps[request_id].append(gap)
        ids_end, ids_per_run, _ = self._runs()
        gaps_end = self.run_gaps_end.tolist()
        for run, (end, size) in enumerate(zip(ids_end.tolist(), ids_per_run.tolist(),
                                              strict=True)):
            run_gaps = self.run_gaps[(gaps_end[run - 1] if run else 0):gaps_end[run]].tolist()
            for request_id in self.run_ids[end - size:end]:
                gaps[request_id].extend(run_gaps)
        return gaps

    def max_gap_by_request(self, num_requests: int) -> np.ndarray:
        """Each request's longest gap (ids 0 … num_requests − 1), NaN for a request with no
        gap (fewer than two tokens). The same stored doubles as `values_and_weights`, so the
        largest over any set of requests is exactly the largest of their pooled gaps."""
        longest = np.full(num_requests, -np.inf)
        np.maximum.at(longest, np.frombuffer(self.single_request, dtype=np.int32),
                      np.frombuffer(self.single_gap, dtype=np.float64))
        ids_end, ids_per_run, _ = self._runs()
        run_max = self._run_max()
        run_ids = np.frombuffer(self.run_ids, dtype=np.int32)
        # Each run's max goes to each of its ids, a block of runs at a time: one value per id
        # at once would be twice the ids' own memory (docs/performance.md, "What a run keeps").
        cuts = np.searchsorted(ids_end, np.arange(_MAX_GAP_BLOCK, run_ids.size, _MAX_GAP_BLOCK))
        for first, last in pairwise([0, *np.unique(cuts).tolist(), ids_end.size]):
            if last > first:
                start = int(ids_end[first] - ids_per_run[first])
                np.maximum.at(longest, run_ids[start:int(ids_end[last - 1])],
                              np.repeat(run_max[first:last], ids_per_run[first:last]))
        longest[np.isneginf(longest)] = np.nan
        return longest

    def _run_max(self) -> np.ndarray:
        """Each run's longest gap; -inf for a run without gaps."""
        _, _, gaps_per_run = self._runs()
        run_max = np.full(gaps_per_run.size, -np.inf)
        has_gaps = gaps_per_run > 0
        if has_gaps.any():
            # A run's gaps are contiguous and runs without gaps add none, so the starts of the
            # runs that have gaps split `run_gaps` into exactly their segments.
            starts = (np.cumsum(gaps_per_run) - gaps_per_run)[has_gaps]
            run_max[has_gaps] = np.maximum.reduceat(
                np.frombuffer(self.run_gaps, dtype=np.float64), starts)
        return run_max

    def values_and_weights(self, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gaps of the requests where `counted[request_id]` is True, as (values, repeats):
        the single gaps, then each run's gaps weighted by its counted requests; gaps that no
        counted request saw are left out. Both arrays are new (the caller may reorder them);
        the weights are 32-bit (each at most a batch's size)."""
        single = np.frombuffer(self.single_gap, dtype=np.float64)
        single_kept = counted[np.frombuffer(self.single_request, dtype=np.int32)]
        _, _, gaps_per_run = self._runs()
        run_weights = np.repeat(self._counted_per_run(counted), gaps_per_run)
        run_kept = run_weights > 0
        num_single = int(np.count_nonzero(single_kept))
        size = num_single + int(np.count_nonzero(run_kept))
        # Filled in place, so that no gap-long array is copied on the way.
        values = np.empty(size, dtype=np.float64)
        weights = np.ones(size, dtype=np.int32)
        np.compress(single_kept, single, out=values[:num_single])
        np.compress(run_kept, np.frombuffer(self.run_gaps, dtype=np.float64),
                    out=values[num_single:])
        np.compress(run_kept, run_weights, out=weights[num_single:])
        return values, weights


@dataclass(slots=True, weakref_slot=True)
class RunRecord:
    """The raw outcome of simulating one arm: requests, step statistics, token gaps.

    `measure` says, before the run, what the step statistics are kept for (the time-series
    bin width, the window's warm-up and cool-down); the default is bins of 1 s and a window
    from 0 with no cool-down.
    """

    requests: list[Request] = field(default_factory=list)
    steps: StepStats = field(init=False)
    itl: ITLLog = field(default_factory=ITLLog)
    kv_blocks_per_replica: int = 0
    # Each replica's KV blocks when they differ (the two pools of a disaggregated arm); empty
    # when every replica has `kv_blocks_per_replica`.
    kv_blocks_by_replica: list[int] = field(default_factory=list)
    num_replicas: int = 1
    # A fragmentation meter per replica whose policy names its KV holders
    # (sim/kv_fragmentation.py), in replica order.
    kv_fragmentation: list[FragmentationMeter] = field(default_factory=list)
    # The steps and preemptions kept one by one for a timeline (`output.trace`); None: not
    # asked for, and the engine keeps nothing per step.
    step_trace: StepTrace | None = None

    def __post_init__(self) -> None:
        self.steps = StepStats(kv_capacity=self._kv_capacity_reader())

    def measure(self, measurement: Measurement) -> None:
        """Keep the step statistics for `measurement` (before anything is recorded)."""
        assert not self.steps.recorded(), "the run has started recording"
        self.steps = StepStats(measurement=measurement, kv_capacity=self._kv_capacity_reader())

    def _kv_capacity_reader(self) -> Callable[[np.ndarray], np.ndarray]:
        """`kv_capacity` for the step statistics, through a weak reference: a reference back
        from what the record owns would be a cycle, and a finished run's record (its bins and
        gaps) would wait for the cyclic collector instead of going with its last reference."""
        record = weakref.ref(self)

        def capacity(replica: np.ndarray) -> np.ndarray:
            owner = record()
            assert owner is not None, "the step statistics outlived their record"
            return owner.kv_capacity(replica)
        return capacity

    def add_request(self, request: Request) -> None:
        """A request reached the simulation (its arrival may make earlier ones measured)."""
        self.requests.append(request)
        self.steps.request_arrived(request.arrival_s)

    def request_done(self, request: Request) -> None:
        """A request ended: finished (its finish may bound the window's end) or rejected."""
        if request.status is RequestStatus.FINISHED:
            self.steps.request_finished(request.arrival_s, request.finish_s)

    def record_tokens(self, requests: list[Request], now: float) -> None:
        """Timestamp each emitted token: the first sets TTFT, later ones add an ITL gap."""
        ids: list[int] = []
        gaps: list[float] = []
        add_id, add_gap = ids.append, gaps.append  # bound once: this runs for every step
        for request in requests:
            if request.num_generated == 1:
                request.first_token_s = now
            else:
                add_id(request.request_id)
                add_gap(now - request.last_token_s)
            request.last_token_s = now
        if not gaps:
            return
        if gaps.count(gaps[0]) == len(gaps):  # the batch emitted its previous tokens together
            self.itl.add_run(ids, gaps[:1])
        else:
            self.itl.add_singles(ids, gaps)

    def kv_capacity(self, replica: np.ndarray) -> np.ndarray:
        """KV blocks of the replica of each step row."""
        if self.kv_blocks_by_replica:
            return np.asarray(self.kv_blocks_by_replica, dtype=np.float64)[replica]
        return np.full(replica.shape, float(max(1, self.kv_blocks_per_replica)))

    def num_itl_gaps(self) -> int:
        """Inter-token gaps recorded, counting each run once per request that saw it."""
        return self.itl.count()

    def record_occupancy(self, now: float, in_system: int) -> None:
        self.steps.record_occupancy(now, in_system)
