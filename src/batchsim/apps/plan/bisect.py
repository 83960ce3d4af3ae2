"""Bisection of a load to the largest value that meets the SLO, one step at a time.

Pure bookkeeping: the planner asks each bisection for the loads it wants next, evaluates them
(several bisections in the same round), and records the outcomes. It assumes that meeting the
SLO is monotone in the load (more load, never better latency); the runs of one bisection use
the same seed, so arrival times at different rates are the same stream rescaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SEARCHING = "searching"
FOUND = "found"  # low meets, high misses: the answer is within tolerance below the boundary
MISSES_AT_LOW = "misses at low"  # no load in [low, high] meets the SLO
MEETS_AT_HIGH = "meets at high"  # the answer is at least high


@dataclass(slots=True)
class RateBisection:
    low: float
    high: float
    tolerance: float
    passing: float | None = None  # the highest load known to meet the SLO
    failing: float | None = None  # the lowest load known to miss it
    status: str = SEARCHING
    steps: list[tuple[float, bool]] = field(default_factory=list)  # (load, meets) in order

    def next_loads(self) -> list[float]:
        """Loads to evaluate next: both ends first, then one midpoint per round."""
        if self.status != SEARCHING:
            return []
        if not self.steps:
            return [self.low, self.high]
        assert self.passing is not None and self.failing is not None
        # Rounded so that folder names stay short; exact for brackets that halve in binary.
        return [round(self.passing + (self.failing - self.passing) / 2, 9)]

    def record(self, load: float, meets: bool) -> None:
        self.steps.append((load, meets))
        if meets and (self.passing is None or load > self.passing):
            self.passing = load
        if not meets and (self.failing is None or load < self.failing):
            self.failing = load
        self._update_status()

    def _update_status(self) -> None:
        tried = {load for load, _ in self.steps}
        if not {self.low, self.high} <= tried:
            return
        if self.passing is None or self.failing == self.low:
            self.status = MISSES_AT_LOW
        elif self.failing is None:
            self.status = MEETS_AT_HIGH
        elif self.failing - self.passing <= self.tolerance * (1 + 1e-9):
            self.status = FOUND

    @property
    def answer(self) -> float | None:
        """The largest load found to meet the SLO (None if even `low` misses it)."""
        return None if self.status == MISSES_AT_LOW else self.passing
