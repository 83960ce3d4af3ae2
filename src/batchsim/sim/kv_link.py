"""The link that carries KV caches from a prefill pool to a decode pool (docs/design.md §2,
disaggregated).

Bandwidth is shared equally by the transfers whose bytes are on the link (processor sharing):
with n of them each moves at `bandwidth / n`. A transfer alone takes `latency + bytes /
bandwidth`: its latency (setup and propagation) is paid once, after its last byte has left, and
does not occupy the link, so a transfer in its latency does not slow the others.

Exact and event-driven, with one pending timer: every transfer on the link has received the same
service since it joined, so the link keeps one "virtual" count of bytes served to each transfer
present; a transfer that joins when that count is V and carries b bytes leaves when it reaches
V + b. The next departure is the smallest such tag, and its time follows from the number on the
link. A join or a departure changes the rate, so the timer is set again (stale ones are ignored).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

OnArrival = Callable[[], None]


@dataclass(order=True, slots=True)
class _OnLink:
    """A transfer whose bytes are on the link, ordered by the virtual count at which it leaves."""

    leaves_at: float
    sequence: int  # ties leave in the order they joined
    on_arrival: OnArrival = field(compare=False)
    pay_latency: bool = field(compare=False)


class KVLink:
    """A shared link: `send` bytes, get a callback when they have arrived."""

    def __init__(self, env: simpy.Environment, *, bandwidth_bytes_s: float,
                 latency_s: float) -> None:
        if not bandwidth_bytes_s > 0 or latency_s < 0:
            raise ValueError("a KV link needs a positive bandwidth and a latency of at least 0")
        self.env = env
        self.bandwidth = bandwidth_bytes_s  # math.inf: transfers take only their latency
        self.latency = latency_s
        self.bytes_sent = 0.0
        self.busy_start = array("d")  # intervals during which bytes were moving
        self.busy_end = array("d")
        self._on_link: list[_OnLink] = []
        self._served = 0.0  # bytes served to each transfer on the link (the virtual count)
        self._served_at = 0.0  # simulated time at which `_served` was brought up to date
        self._joined = 0
        self._timer = 0  # the number of the timer that is not stale

    @property
    def num_active(self) -> int:
        """Transfers whose bytes are on the link now (not those in their latency)."""
        return len(self._on_link)

    def send(self, num_bytes: float, on_arrival: OnArrival, *, pay_latency: bool = True) -> None:
        """Put `num_bytes` on the link; `on_arrival()` runs when they have all arrived.

        `pay_latency=False` is for the leading part of a pipelined transfer, whose remaining
        bytes follow on the same stream: the latency is paid once, by the last part. A transfer
        that takes no time at all calls `on_arrival` before returning.
        """
        if num_bytes < 0:
            raise ValueError(f"cannot send {num_bytes} bytes")
        self.bytes_sent += num_bytes
        if num_bytes == 0 or math.isinf(self.bandwidth):
            self._arrive(on_arrival, pay_latency)
            return
        self._catch_up()
        if not self._on_link:
            self._busy_from(self.env.now)
        heapq.heappush(self._on_link, _OnLink(self._served + num_bytes, self._joined, on_arrival,
                                              pay_latency))
        self._joined += 1
        self._set_timer()

    def busy_seconds(self, start: float, end: float) -> float:
        """Seconds within [start, end] during which bytes were moving (the link was busy)."""
        starts = np.frombuffer(self.busy_start, dtype=np.float64)
        ends = np.frombuffer(self.busy_end, dtype=np.float64)
        if self._on_link:  # still busy: the open interval runs to now
            ends = np.append(ends, self.env.now)
        return float(np.clip(np.minimum(ends, end) - np.maximum(starts, start), 0.0, None).sum())

    def utilization(self, start: float, end: float) -> float:
        """Busy time / duration over [start, end]."""
        return self.busy_seconds(start, end) / (end - start) if end > start else 0.0

    def _catch_up(self) -> None:
        """Credit each transfer on the link with its share of the bytes moved since last time."""
        now = self.env.now
        if self._on_link:
            self._served += (now - self._served_at) * self.bandwidth / len(self._on_link)
        self._served_at = now

    def _set_timer(self) -> None:
        self._timer += 1
        if not self._on_link:
            return
        left = self._on_link[0].leaves_at - self._served
        delay = max(0.0, left * len(self._on_link) / self.bandwidth)
        timer = self.env.timeout(delay)
        number = self._timer
        timer.callbacks.append(lambda _event: self._depart(number))

    def _depart(self, number: int) -> None:
        """The timer fired: the transfers with the smallest tag have sent their last byte."""
        if number != self._timer:
            return  # a join or departure since then moved the departure
        self._served = self._on_link[0].leaves_at  # exact, rather than accumulated rounding
        self._served_at = self.env.now
        leaving = []
        while self._on_link and self._on_link[0].leaves_at <= self._served:
            leaving.append(heapq.heappop(self._on_link))
        if not self._on_link:
            self.busy_end.append(self.env.now)
        self._set_timer()
        for transfer in leaving:  # callbacks last: they may send more bytes
            self._arrive(transfer.on_arrival, transfer.pay_latency)

    def _busy_from(self, now: float) -> None:
        if self.busy_end and self.busy_end[-1] == now:
            self.busy_end.pop()  # busy again at the instant it went idle: one interval
        else:
            self.busy_start.append(now)

    def _arrive(self, on_arrival: OnArrival, pay_latency: bool) -> None:
        if not pay_latency or self.latency == 0:
            on_arrival()
            return
        self.env.timeout(self.latency).callbacks.append(lambda _event: on_arrival())


class KVLinks:
    """The links a disaggregated deployment's KV caches cross: one `shared` by every transfer
    (an arm's `kv_link` of a given bandwidth), or one per prefill replica (its GPUs' own
    NICs), which the transfers from that replica share and no other replica's slow down."""

    def __init__(self, env: simpy.Environment, *, bandwidth_bytes_s: float, latency_s: float,
                 shared: bool, prefill_replicas: int) -> None:
        self._make = lambda: KVLink(env, bandwidth_bytes_s=bandwidth_bytes_s,
                                    latency_s=latency_s)
        self.shared = shared
        self.links = [self._make() for _ in range(1 if shared else prefill_replicas)]

    def of(self, prefill_replica: int) -> KVLink:
        """The link a transfer from `prefill_replica` crosses (a replica added by scaling gets
        its own when it first sends)."""
        if self.shared:
            return self.links[0]
        while prefill_replica >= len(self.links):
            self.links.append(self._make())
        return self.links[prefill_replica]

    def utilization(self, start: float, end: float) -> float:
        """The links' mean busy time / duration over [start, end]."""
        return sum(link.utilization(start, end) for link in self.links) / len(self.links)
