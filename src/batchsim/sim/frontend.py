"""The serving engine's front end: what a request goes through between the client and the
scheduler (docs/design.md §13).

Two costs on the way in: a latency every request pays independently (network, HTTP, streaming
the tokens back), and a serial cost paid one request at a time, because one API-server process
tokenises and sets up requests in turn. The serial part is why requests sent at the same
instant reach the scheduler one after another, and so why a closed loop of identical
requests does not stay in lock-step. A third on the way out, `stream_s`, is the cost of each
streamed output message, paid one at a time by each replica's API server
(sim/token_stream.py).
"""

from __future__ import annotations

from batchsim.sim.token_stream import TokenStream


class Frontend:
    """The API-server front ends of a deployment: `reaches_scheduler` must be called in send
    order. Each of `servers` processes (one per replica: every engine instance runs its own)
    does the serial part one request at a time; a request takes the first one free. The
    `stream_servers` after them only stream (a disaggregated deployment's decode instances:
    their tokens, not the requests, go through them)."""

    __slots__ = ("_free_at", "_intake", "_streams", "latency_s", "serial_s", "stream_s")

    def __init__(self, latency_s: float = 0.0, serial_s: float = 0.0, servers: int = 1,
                 stream_s: float = 0.0, stream_servers: int = 0) -> None:
        if not (latency_s >= 0.0 and serial_s >= 0.0 and stream_s >= 0.0):
            raise ValueError(f"front-end costs must be >= 0, got latency {latency_s}, "
                             f"serial {serial_s}, stream {stream_s}")
        if servers < 1 or stream_servers < 0:
            raise ValueError(f"a front end needs at least one server taking requests in and "
                             f"no fewer than 0 streaming ones, got {servers} and "
                             f"{stream_servers}")
        self.latency_s = latency_s
        self.serial_s = serial_s
        self.stream_s = stream_s
        self._free_at = [0.0] * (servers + stream_servers)  # when each server is next free
        self._intake = servers  # the first ones take requests in
        self._streams: list[TokenStream] = []  # the streaming sides handed out

    @property
    def delays(self) -> bool:
        """Whether a request reaches the scheduler later than it was sent."""
        return self.latency_s > 0.0 or self.serial_s > 0.0 or self.stream_s > 0.0

    def reaches_scheduler(self, sent_s: float) -> float:
        """When a request sent at `sent_s` reaches the scheduler: after what the first server
        to be free had to do before it (the requests before it, the tokens it streams), and
        the serial part. With streaming, call it when the request is sent."""
        for stream in self._streams:
            stream.catch_up(sent_s)
        free_at = self._free_at
        intake = free_at if self._intake == len(free_at) else free_at[:self._intake]
        server = intake.index(min(intake))
        done = max(sent_s, free_at[server]) + self.serial_s
        free_at[server] = done
        return done + self.latency_s

    @property
    def intake_servers(self) -> int:
        """How many servers take requests in; the streaming-only ones are numbered after."""
        return self._intake

    def stream(self, replica: int) -> TokenStream | None:
        """The streaming side of replica `replica`'s API server (None: streaming costs nothing,
        or the replica has no server of its own)."""
        if self.stream_s <= 0.0 or replica >= len(self._free_at):
            return None
        stream = TokenStream(self._free_at, replica, self.stream_s)
        self._streams.append(stream)
        return stream
