"""The serving engine's front end: what a request goes through between the client and the
scheduler (docs/design.md §13).

Two costs: a latency every request pays independently (network, HTTP, streaming the tokens
back), and a serial cost paid one request at a time, because one API-server process
tokenises and sets up requests in turn. The serial part is why requests sent at the same
instant reach the scheduler one after another, and so why a closed loop of identical
requests does not stay in lock-step.
"""

from __future__ import annotations

import heapq


class Frontend:
    """The API-server front ends of a deployment: `reaches_scheduler` must be called in send
    order. Each of `servers` processes (one per replica: every engine instance runs its own)
    does the serial part one request at a time; a request takes the first one free."""

    __slots__ = ("_free_at", "latency_s", "serial_s")

    def __init__(self, latency_s: float = 0.0, serial_s: float = 0.0, servers: int = 1) -> None:
        if not (latency_s >= 0.0 and serial_s >= 0.0):
            raise ValueError(f"front-end costs must be >= 0, got latency {latency_s}, "
                             f"serial {serial_s}")
        if servers < 1:
            raise ValueError(f"a front end needs at least one server, got {servers}")
        self.latency_s = latency_s
        self.serial_s = serial_s
        self._free_at = [0.0] * servers  # a heap: when each server is next free

    @property
    def delays(self) -> bool:
        """Whether a request reaches the scheduler later than it was sent."""
        return self.latency_s > 0.0 or self.serial_s > 0.0

    def reaches_scheduler(self, sent_s: float) -> float:
        """When a request sent at `sent_s` reaches the scheduler: after the requests sent
        before it on the first server to be free have been through the serial part."""
        done = max(sent_s, self._free_at[0]) + self.serial_s
        heapq.heapreplace(self._free_at, done)
        return done + self.latency_s
