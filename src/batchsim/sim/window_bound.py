"""A lower bound of the measurement window's end, known while the run goes (sim/step_window.py).

The window ends at the last finish of a measured request: one that arrived at or after
warmup_s and by the last arrival minus cooldown_s (metrics/summary.py `measured_mask`). The
last arrival is known only at the end, but it only grows: a finished request that arrived at or
after warmup_s and by the latest arrival so far minus cooldown_s is measured whatever comes
later, and the window ends no earlier than its finish.
"""

from __future__ import annotations

import heapq
import math


class WindowBound:
    """The bound from the requests seen so far (see the module)."""

    __slots__ = ("_latest_arrival", "_pending", "cooldown_s", "value", "warmup_s")

    def __init__(self, warmup_s: float, cooldown_s: float) -> None:
        self.warmup_s, self.cooldown_s = warmup_s, cooldown_s
        # The window starts at warmup_s: a step that ended by then has no seconds in it.
        self.value = warmup_s
        self._latest_arrival = -math.inf
        # (arrival, finish) of finished requests not yet known to be measured, by arrival.
        self._pending: list[tuple[float, float]] = []

    def arrived(self, arrival_s: float) -> None:
        if arrival_s > self._latest_arrival:
            self._latest_arrival = arrival_s

    def seen_arrival(self) -> bool:
        return self._latest_arrival > -math.inf

    def finished(self, arrival_s: float, finish_s: float) -> None:
        if arrival_s < self.warmup_s:
            return
        # Known to be measured already (always, without a cool-down): no need to wait.
        if arrival_s <= self._latest_arrival - self.cooldown_s:
            if finish_s > self.value:
                self.value = finish_s
        else:
            heapq.heappush(self._pending, (arrival_s, finish_s))

    def current(self) -> float:
        """The bound now: the latest finish of the requests known to be measured."""
        # The same comparison as measured_mask's; the last arrival only grows, so a request
        # known to be measured stays so.
        latest_measured = self._latest_arrival - self.cooldown_s
        pending = self._pending
        while pending and pending[0][0] <= latest_measured:
            _, finish = heapq.heappop(pending)
            if finish > self.value:
                self.value = finish
        return self.value

    def nbytes(self) -> int:
        return 16 * len(self._pending)
