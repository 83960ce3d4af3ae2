"""The decode steps' seconds per emitted token, read at any instant (a disaggregated decode
pool's `itl` scaling signal; docs/design.md §2, autoscaling).

Each step adds its seconds once per sequence that emitted a token in it: over an interval,
the change of `seconds` over the change of `tokens` is the gap a request decoding back to back
sees, averaged over the tokens. A fast-path stretch is read as stepping one by one has it:
the steps whose end has passed count, and the stretch adds the rest when it is applied.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass


@dataclass(slots=True)
class TokenMeter:
    seconds: float = 0.0  # Σ over steps of emitting sequences × the step's seconds
    tokens: int = 0
    # A stretch in flight: its start, its steps' end times, the sequences emitting per step.
    _stretch: tuple[float, list[float], int] | None = None

    def step(self, emitting: int, duration: float) -> None:
        self.seconds += emitting * duration
        self.tokens += emitting

    def stretch_started(self, start: float, ends: list[float], emitting: int) -> None:
        self._stretch = (start, ends, emitting)

    def stretch_applied(self, steps_in_bulk: int) -> None:
        """The stretch's first `steps_in_bulk` steps are applied (its last goes to `step`)."""
        assert self._stretch is not None
        start, ends, emitting = self._stretch
        self._stretch = None
        if steps_in_bulk:
            self.seconds += emitting * (ends[steps_in_bulk - 1] - start)
            self.tokens += emitting * steps_in_bulk

    def read(self, now: float) -> tuple[float, int]:
        """(seconds, tokens) as of `now`."""
        if self._stretch is None:
            return self.seconds, self.tokens
        start, ends, emitting = self._stretch
        done = bisect_right(ends, now)
        if not done:
            return self.seconds, self.tokens
        return (self.seconds + emitting * (ends[done - 1] - start),
                self.tokens + emitting * done)
