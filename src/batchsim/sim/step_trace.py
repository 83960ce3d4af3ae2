"""Engine steps and preemptions kept one by one for a timeline (`output.trace`,
docs/reference/outputs.md "trace.json"): what the step statistics fold away.

Kept only when asked for, and bounded: the first `max_steps` steps recorded that overlap the
window, and the preemptions of requests arriving in it (as many again). A fast-path stretch
(sim/stretch.py) is kept as the steps it stands for, one row each, so that every step is in
the timeline and a replica's step durations sum to its busy time.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan


@dataclass(frozen=True, slots=True)
class TraceBounds:
    """What a timeline keeps: steps overlapping [start_s, end_s] and requests arriving in it,
    at most `max_steps` steps (and as many preemptions) and `max_requests` requests."""

    start_s: float = 0.0
    end_s: float = math.inf
    max_steps: int = 100_000
    max_requests: int = 1_000

    def overlaps(self, start: float, end: float) -> bool:
        return end >= self.start_s and start <= self.end_s


@dataclass(slots=True)
class Preemption:
    """A request preempted at the start of a step and, once scheduled again, resumed."""

    request_id: int
    replica: int
    start_s: float
    end_s: float = math.nan  # NaN while it waits


@dataclass(slots=True)
class StepTrace:
    """The kept steps as columns (one row per step) and the kept preemptions."""

    bounds: TraceBounds = field(default_factory=TraceBounds)
    start_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    replica: array = field(default_factory=lambda: array("i"))
    batch_size: array = field(default_factory=lambda: array("i"))
    prefill_tokens: array = field(default_factory=lambda: array("q"))
    decode_tokens: array = field(default_factory=lambda: array("q"))
    preempted: array = field(default_factory=lambda: array("i"))
    preemptions: list[Preemption] = field(default_factory=list)
    steps_dropped: int = 0  # overlapping the window, past `max_steps`
    # The earliest start of a dropped step: every step starting before it is kept.
    complete_until_s: float = math.inf
    preemptions_dropped: int = 0
    # Kept preemptions still waiting, by request id.
    _waiting: dict[int, Preemption] = field(default_factory=dict, repr=False)

    def step(self, plan: StepPlan, start: float, duration: float, replica: int) -> None:
        """A step the engine applied (not one a stretch applied in bulk)."""
        if self._waiting:
            self._resume(plan.requests, start)
        for request in plan.preempted:
            self._preempt(request, replica, start)
        if not self._room(start, start + duration):
            return
        prefill = 0
        for request, tokens, context in zip(plan.requests, plan.num_new_tokens, plan.contexts,
                                            strict=True):
            prefill += max(0, min(context + tokens, request.prompt_tokens) - context)
        decode = plan.total_new_tokens + plan.verified_tokens - prefill
        self._add(start, duration, replica, len(plan.requests), prefill, decode,
                  len(plan.preempted))

    def stretch(self, starts: list[float], durations: list[float], replica: int,
                batch_size: int) -> None:
        """The decode steps a fast-path stretch applied in bulk: one token per sequence each,
        no preemption."""
        for start, duration in zip(starts, durations, strict=True):
            if self._room(start, start + duration):
                self._add(start, duration, replica, batch_size, 0, batch_size, 0)

    def _room(self, start: float, end: float) -> bool:
        """Whether a step over [start, end] is kept (counting those dropped for the limit)."""
        if not self.bounds.overlaps(start, end):
            return False
        if len(self.start_s) < self.bounds.max_steps:
            return True
        self.steps_dropped += 1
        self.complete_until_s = min(self.complete_until_s, start)
        return False

    def _add(self, start: float, duration: float, replica: int, batch_size: int,
             prefill: int, decode: int, preempted: int) -> None:
        self.start_s.append(start)
        self.duration_s.append(duration)
        self.replica.append(replica)
        self.batch_size.append(batch_size)
        self.prefill_tokens.append(prefill)
        self.decode_tokens.append(decode)
        self.preempted.append(preempted)

    def _preempt(self, request: Request, replica: int, now: float) -> None:
        bounds = self.bounds
        if not bounds.start_s <= request.arrival_s <= bounds.end_s:
            return
        if len(self.preemptions) >= bounds.max_steps:
            self.preemptions_dropped += 1
            return
        preemption = Preemption(request.request_id, replica, now)
        self.preemptions.append(preemption)
        self._waiting[request.request_id] = preemption

    def _resume(self, scheduled: list[Request], now: float) -> None:
        for request in scheduled:
            preemption = self._waiting.pop(request.request_id, None)
            if preemption is not None:
                preemption.end_s = now

    def __len__(self) -> int:
        return len(self.start_s)
