"""Everything a run records, kept as flat growable arrays so that memory stays linear."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from sim.request import Request


@dataclass(slots=True)
class StepLog:
    """One row per engine step, over all replicas."""

    start_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    replica: array = field(default_factory=lambda: array("i"))
    num_seqs: array = field(default_factory=lambda: array("i"))  # sequences with tokens this step
    new_tokens: array = field(default_factory=lambda: array("q"))
    emitted_tokens: array = field(default_factory=lambda: array("i"))
    kv_used_blocks: array = field(default_factory=lambda: array("q"))
    num_waiting: array = field(default_factory=lambda: array("i"))
    preempted: array = field(default_factory=lambda: array("i"))

    def append(
        self, start: float, duration: float, replica: int, num_seqs: int, new_tokens: int,
        emitted: int, kv_used: int, waiting: int, preempted: int,
    ) -> None:
        self.start_s.append(start)
        self.duration_s.append(duration)
        self.replica.append(replica)
        self.num_seqs.append(num_seqs)
        self.new_tokens.append(new_tokens)
        self.emitted_tokens.append(emitted)
        self.kv_used_blocks.append(kv_used)
        self.num_waiting.append(waiting)
        self.preempted.append(preempted)

    def extend(
        self, *, start_s: np.ndarray, duration_s: np.ndarray, replica: int, num_seqs: int,
        new_tokens: int, emitted: int, kv_used: np.ndarray, waiting: int,
    ) -> None:
        """Append one row per element of `start_s`; scalars repeat, no preemptions."""
        count = start_s.size

        def put(column: array, values: np.ndarray) -> None:
            column.frombytes(values.astype(column.typecode, copy=False).tobytes())

        put(self.start_s, start_s)
        put(self.duration_s, duration_s)
        put(self.kv_used_blocks, kv_used)
        for column, value in ((self.replica, replica), (self.num_seqs, num_seqs),
                              (self.new_tokens, new_tokens), (self.emitted_tokens, emitted),
                              (self.num_waiting, waiting), (self.preempted, 0)):
            column.extend(array(column.typecode, (value,)) * count)  # repeated in C

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {name: np.frombuffer(getattr(self, name), dtype=getattr(self, name).typecode)
                for name in self.__slots__}


@dataclass(slots=True)
class ITLLog:
    """Every inter-token gap, stored so that memory grows with steps, not with tokens.

    A *run* is a batch of requests that saw the same gaps: each gap of the run was seen once
    by each of its requests (a fast-path stretch, or a step whose batch emitted together).
    Runs are kept flat — all their ids in one array, all their gaps in another, with the end
    offsets of each run — so a run costs bytes, not Python objects. Gaps that differ between
    the requests of a step are kept one by one.
    """

    single_request: array = field(default_factory=lambda: array("q"))
    single_gap: array = field(default_factory=lambda: array("d"))
    run_ids: array = field(default_factory=lambda: array("q"))
    run_gaps: array = field(default_factory=lambda: array("d"))
    run_ids_end: array = field(default_factory=lambda: array("q"))
    run_gaps_end: array = field(default_factory=lambda: array("q"))

    def add_run(self, ids: np.ndarray, gaps: np.ndarray) -> None:
        self.run_ids.frombytes(ids.astype(np.int64, copy=False).tobytes())
        self.run_gaps.frombytes(gaps.astype(np.float64, copy=False).tobytes())
        self.run_ids_end.append(len(self.run_ids))
        self.run_gaps_end.append(len(self.run_gaps))

    def add_singles(self, ids: np.ndarray, gaps: np.ndarray) -> None:
        self.single_request.frombytes(ids.astype(np.int64, copy=False).tobytes())
        self.single_gap.frombytes(gaps.astype(np.float64, copy=False).tobytes())

    def _runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each run's end offset into `run_ids`, its request count and its gap count."""
        ids_end = np.frombuffer(self.run_ids_end, dtype=np.int64)
        gaps_end = np.frombuffer(self.run_gaps_end, dtype=np.int64)
        return ids_end, np.diff(ids_end, prepend=0), np.diff(gaps_end, prepend=0)

    def count(self) -> int:
        """Gaps recorded, counting each run's gaps once per request that saw them."""
        _, ids_per_run, gaps_per_run = self._runs()
        return len(self.single_gap) + int(np.dot(ids_per_run, gaps_per_run))

    def values_and_weights(self, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gaps of the requests where `counted[request_id]` is True, as (values, repeats)."""
        single_ids = np.frombuffer(self.single_request, dtype=np.int64)
        single = np.frombuffer(self.single_gap, dtype=np.float64)
        values = single[counted[single_ids]] if single_ids.size else single
        weights = np.ones(values.size, dtype=np.int64)
        ids_end, _, gaps_per_run = self._runs()
        if not ids_end.size:
            return values, weights
        run_ids = np.frombuffer(self.run_ids, dtype=np.int64)
        # Requests of each run that are counted: a cumulative count read at the run ends.
        counted_so_far = np.concatenate(([0], np.cumsum(counted[run_ids], dtype=np.int64)))
        per_run = np.diff(counted_so_far[ids_end], prepend=0)
        run_weights = np.repeat(per_run, gaps_per_run)
        keep = run_weights > 0
        run_gaps = np.frombuffer(self.run_gaps, dtype=np.float64)
        return (np.concatenate((values, run_gaps[keep])),
                np.concatenate((weights, run_weights[keep])))


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
            self.itl.add_run(np.array(ids), np.array(gaps[:1]))
        else:
            self.itl.add_singles(np.array(ids), np.array(gaps))

    def kv_capacity(self, replica: np.ndarray) -> np.ndarray:
        """KV blocks of the replica of each step-log row."""
        if self.kv_blocks_by_replica:
            return np.asarray(self.kv_blocks_by_replica, dtype=np.float64)[replica]
        return np.full(replica.shape, float(max(1, self.kv_blocks_per_replica)))

    def num_itl_gaps(self) -> int:
        """Inter-token gaps recorded, counting each run once per request that saw it."""
        return self.itl.count()

    def record_occupancy(self, now: float, in_system: int) -> None:
        if self.occupancy_t and self.occupancy_t[-1] == now:
            self.occupancy_n[-1] = in_system
        else:
            self.occupancy_t.append(now)
            self.occupancy_n.append(in_system)
