"""Everything a run records, kept as flat growable arrays so that memory stays linear."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from batchsim.sim.request import Request

# The step log's columns, in the order `as_arrays` lists them. Start, duration and KV use change
# every step and are kept per row; the others repeat over the steps of a fast-path stretch and
# are kept once per segment (consecutive rows that agree on all of them).
STEP_COLUMNS = ("start_s", "duration_s", "replica", "num_seqs", "new_tokens", "emitted_tokens",
                "kv_used_blocks", "num_waiting", "preempted")
_ROW_COLUMNS = ("start_s", "duration_s", "kv_used_blocks")
_SEGMENT_COLUMNS = ("replica", "num_seqs", "new_tokens", "emitted_tokens", "num_waiting",
                    "preempted")


# Columns are appended from arrays or from lists: the fast path's stretches and the steps'
# batches are a few dozen values, where converting a list through numpy costs more than the
# copy. (Request ids fit 32 bits: 2³¹ requests would be terabytes of request objects.)
_Ints = Sequence[int] | np.ndarray
_Floats = Sequence[float] | np.ndarray


def _extend(column: array, values: _Ints | _Floats) -> None:
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

    def extend(
        self, *, start_s: _Floats, duration_s: _Floats, replica: int, num_seqs: int,
        new_tokens: int, emitted: int, kv_used: _Ints, waiting: int,
    ) -> None:
        """Append one row per element of `start_s`; scalars repeat, no preemptions."""
        _extend(self.start_s, start_s)
        _extend(self.duration_s, duration_s)
        _extend(self.kv_used_blocks, kv_used)
        self._add_rows(len(start_s), (replica, num_seqs, new_tokens, emitted, waiting, 0))

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
        column = getattr(self, name)
        return np.frombuffer(column, dtype=column.typecode)

    def per_row(self, per_segment: np.ndarray) -> np.ndarray:
        """Repeat one value per segment (e.g. a function of `segment_column`) over its rows."""
        return np.repeat(per_segment, np.frombuffer(self.segment_rows, dtype=np.int32))

    def column(self, name: str) -> np.ndarray:
        """One value per row. The per-row columns are views of the log (free, but the log
        cannot grow while one is held); the per-segment ones are expanded (a new array)."""
        if name in _ROW_COLUMNS:
            column = getattr(self, name)
            return np.frombuffer(column, dtype=column.typecode)
        return self.per_row(self.segment_column(name))

    def as_arrays(self) -> Mapping[str, np.ndarray]:
        """Every column by name, each expanded only when looked up."""
        return _LazyColumns(self)

    def window_overlap(self, start: float, end: float) -> np.ndarray:
        """Seconds of each step inside [start, end] (0 outside), computed in place: at most two
        arrays of the log's length at a time."""
        starts = self.column("start_s")
        overlap = starts + self.column("duration_s")
        np.minimum(overlap, end, out=overlap)
        overlap -= np.maximum(starts, start)
        return np.clip(overlap, 0.0, None, out=overlap)


class _LazyColumns(Mapping[str, np.ndarray]):
    """`StepLog.as_arrays()`: a read-only mapping that builds a column when it is looked up."""

    def __init__(self, log: StepLog) -> None:
        self._log = log

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in STEP_COLUMNS:
            raise KeyError(name)
        return self._log.column(name)

    def __iter__(self) -> Iterator[str]:
        return iter(STEP_COLUMNS)

    def __len__(self) -> int:
        return len(STEP_COLUMNS)


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

    def add_run(self, ids: _Ints, gaps: _Floats) -> None:
        id_list = ids.tolist() if isinstance(ids, np.ndarray) else ids
        if id_list != self._last_run_ids:  # a new batch: a new run
            _extend(self.run_ids, id_list)
            self.run_ids_end.append(len(self.run_ids))
            self.run_gaps_end.append(0)  # set below
            self._last_run_ids = list(id_list)
        _extend(self.run_gaps, gaps)
        self.run_gaps_end[-1] = len(self.run_gaps)

    def add_singles(self, ids: _Ints, gaps: _Floats) -> None:
        _extend(self.single_request, ids)
        _extend(self.single_gap, gaps)

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


@dataclass(slots=True)
class RunRecord:
    """The raw outcome of simulating one arm: requests, steps, token gaps, occupancy."""

    requests: list[Request] = field(default_factory=list)
    steps: StepLog = field(default_factory=StepLog)
    itl: ITLLog = field(default_factory=ITLLog)
    occupancy_t: array = field(default_factory=lambda: array("d"))  # time of each change
    occupancy_n: array = field(default_factory=lambda: array("q"))  # requests in system after it
    kv_blocks_per_replica: int = 0
    # Each replica's KV blocks when they differ (the two pools of a disaggregated arm); empty
    # when every replica has `kv_blocks_per_replica`.
    kv_blocks_by_replica: list[int] = field(default_factory=list)
    num_replicas: int = 1

    def record_tokens(self, requests: list[Request], now: float) -> None:
        """Timestamp each emitted token: the first sets TTFT, later ones add an ITL gap."""
        ids: list[int] = []
        gaps: list[float] = []
        for request in requests:
            if request.num_generated == 1:
                request.first_token_s = now
            else:
                ids.append(request.request_id)
                gaps.append(now - request.last_token_s)
            request.last_token_s = now
        if not gaps:
            return
        if gaps.count(gaps[0]) == len(gaps):  # the batch emitted its previous tokens together
            self.itl.add_run(ids, gaps[:1])
        else:
            self.itl.add_singles(ids, gaps)

    def kv_capacity(self, replica: np.ndarray) -> np.ndarray:
        """KV blocks of the replica of each step-log row."""
        if self.kv_blocks_by_replica:
            return np.asarray(self.kv_blocks_by_replica, dtype=np.float64)[replica]
        return np.full(replica.shape, float(max(1, self.kv_blocks_per_replica)))

    def kv_fraction(self) -> np.ndarray:
        """Each step-log row's KV blocks in use over its replica's (`kv_capacity`)."""
        used = self.steps.column("kv_used_blocks")
        if self.kv_blocks_by_replica:
            capacity = np.asarray(self.kv_blocks_by_replica, dtype=np.float64)
            return used / self.steps.per_row(capacity[self.steps.segment_column("replica")])
        return used / float(max(1, self.kv_blocks_per_replica))

    def num_itl_gaps(self) -> int:
        """Inter-token gaps recorded, counting each run once per request that saw it."""
        return self.itl.count()

    def record_occupancy(self, now: float, in_system: int) -> None:
        if self.occupancy_t and self.occupancy_t[-1] == now:
            self.occupancy_n[-1] = in_system
        else:
            self.occupancy_t.append(now)
            self.occupancy_n.append(in_system)
