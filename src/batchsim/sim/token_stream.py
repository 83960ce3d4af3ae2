"""The API server's output side: every token a replica emits is streamed back to its client by
one server process, one message after another (docs/background/engines.md, "Streaming the
tokens back").

A step's outputs reach the server together when the step ends; the server works through them
at a fixed cost each, after what it had not finished yet, and their clients see them when it is
done. The same process takes in new requests (the front end's serial part), in turn with the
tokens. While the engine emits tokens faster than the server streams them, the server falls
behind: new requests reach the scheduler later, the engine runs fewer requests than there are
users, and their first tokens wait. The server's capacity (one message per cost) is then the
deployment's output-token ceiling.
"""

from __future__ import annotations


class TokenStream:
    """One replica's streaming server: `shown` must be called in step order. `servers` is the
    front end's list of when each API-server process is next free (sim/frontend.py), of which
    this replica's is `servers[index]`: the process that streams the replica's tokens also
    takes in requests, so requests wait behind a backlog of tokens and tokens behind them."""

    __slots__ = ("_messages", "_next", "_pending", "_servers", "_shown", "index", "message_s")

    def __init__(self, servers: list[float], index: int, message_s: float) -> None:
        if not message_s > 0.0:
            raise ValueError(f"a streamed message costs > 0 s, got {message_s}")
        self._servers = servers
        self.index = index
        self.message_s = message_s
        # A stretch in flight (sim/stretch.py): its steps' end times, the messages each emits,
        # how many of its steps were streamed, and when their tokens were seen.
        self._pending: list[float] = []
        self._messages = 0
        self._next = 0
        self._shown: list[float] = []

    def shown(self, step_end: float, messages: int) -> float:
        """When the clients see the `messages` outputs (one per request that emitted) of a step
        that ended at `step_end`: once the server has streamed what came before and them."""
        free = self._servers[self.index]
        done = (step_end if step_end > free else free) + messages * self.message_s
        self._servers[self.index] = done
        return done

    def stretch_started(self, step_ends: list[float], messages: int) -> None:
        """A stretch of steps ending at `step_ends`, each emitting `messages` outputs, has
        begun: its tokens are streamed as its steps end (`catch_up`) or when it ends."""
        self._pending, self._messages, self._next, self._shown = step_ends, messages, 0, []

    def catch_up(self, now: float) -> None:
        """Stream the tokens of the stretch's steps that have ended by `now`, before the server
        takes in a request sent now."""
        pending, cost = self._pending, self._messages * self.message_s
        if self._next >= len(pending) or pending[self._next] > now:
            return
        free = self._servers[self.index]
        while self._next < len(pending) and pending[self._next] <= now:
            end = pending[self._next]
            free = (end if end > free else free) + cost
            self._shown.append(free)
            self._next += 1
        self._servers[self.index] = free

    def stretch_done(self, steps: int) -> list[float]:
        """The stretch ended after its first `steps` steps: when each one's tokens are seen."""
        pending, self._pending = self._pending[:steps], []
        self._next = min(self._next, steps)
        if self._next < steps:
            self._pending = pending
            self.catch_up(pending[-1])
            self._pending = []
        return self._shown[:steps]
