"""Everything a run records, kept as flat growable arrays so that memory stays linear."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import repeat

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
            column.extend(repeat(value, count))

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {name: np.frombuffer(getattr(self, name), dtype=getattr(self, name).typecode)
                for name in self.__slots__}


@dataclass(slots=True)
class RunRecord:
    """The raw outcome of simulating one arm: requests, steps, token gaps, occupancy."""

    requests: list[Request] = field(default_factory=list)
    steps: StepLog = field(default_factory=StepLog)
    itl_request: array = field(default_factory=lambda: array("q"))  # request id of each gap
    itl_s: array = field(default_factory=lambda: array("d"))  # each inter-token gap
    # Gaps shared by a whole batch (fast-path stretches): every gap of `gaps` was seen by every
    # request of `ids`. Kept as runs so memory grows with steps, not with tokens.
    itl_runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    occupancy_t: array = field(default_factory=lambda: array("d"))  # time of each change
    occupancy_n: array = field(default_factory=lambda: array("q"))  # requests in system after it
    kv_blocks_per_replica: int = 0
    num_replicas: int = 1

    def record_tokens(self, requests: list[Request], now: float) -> None:
        """Timestamp each emitted token: the first sets TTFT, later ones add an ITL gap."""
        for request in requests:
            if request.num_generated == 1:
                request.first_token_s = now
            else:
                self.itl_request.append(request.request_id)
                self.itl_s.append(now - request.last_token_s)
            request.last_token_s = now

    def num_itl_gaps(self) -> int:
        """Inter-token gaps recorded, counting each run once per request that saw it."""
        return len(self.itl_s) + sum(ids.size * gaps.size for ids, gaps in self.itl_runs)

    def record_occupancy(self, now: float, in_system: int) -> None:
        if self.occupancy_t and self.occupancy_t[-1] == now:
            self.occupancy_n[-1] = in_system
        else:
            self.occupancy_t.append(now)
            self.occupancy_n.append(in_system)
