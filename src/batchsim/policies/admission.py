"""Admission on arrival and admission into the batch, for the iteration-level policies
(docs/design.md §4).

Two independent options:

- `AdmissionControl` rejects an arriving request when its replica's waiting queue is already
  `max_queue` long, or when the predicted wait exceeds `max_predicted_wait_s`. The prediction
  uses only what a real server can see — no output lengths: a request that would not start at
  the next step waits for the `queued + 1` departures ahead of it (the queue, then itself), each
  taking the replica's recent mean interval between completions, `(now − t_W) / W` over its last
  `W` completions. Until the replica has completed `W` requests there is no prediction and
  nothing is rejected for its wait.
- `KVReserve` is SGLang's conservative admission: a waiting request enters the batch only if the
  KV cache can hold, for every running request and for it, its current tokens plus `ratio ×` its
  remaining decode, estimated as `assumed_max_new_tokens − generated` (SGLang uses the request's
  `max_new_tokens`; the simulator's true output length is never read). The ratio starts at
  `init_ratio`, decays linearly to `min_ratio` over `decay_steps` steps, and jumps back to
  `init_ratio` at every step that preempted (SGLang's retraction). With `admitted_share`, a
  request reserves that share of its remaining decode in the step that admits it (SGLang's
  `PrefillAdder` charges its whole `max_new_tokens`), the ratio from the next step on; with
  `remaining_cap`, no estimate exceeds that many tokens (SGLang clips at 4,096).

Both are fast-path exact: the queue, the running set and the completion times cannot change
during a stretch of decode steps; the reserve of a running request never shrinks while it
decodes at a fixed ratio, so a request it blocked stays blocked; with a decaying ratio the policy
steps one by one while a request waits (`KVReserve.blocks_stretch`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.request import Request

QUEUE_FULL = "queue_full"
PREDICTED_WAIT = "predicted_wait"


@dataclass(slots=True)
class AdmissionControl:
    """Rejects arrivals by queue length or predicted wait; counts the replica's completions."""

    max_queue: int | None = None
    max_predicted_wait_s: float | None = None
    window: int = 16
    _completions: deque[float] = field(default_factory=deque)

    def predicted_wait_s(self, num_waiting: int, has_room: bool, now: float) -> float | None:
        """Seconds until a request arriving now would start; None before `window` completions."""
        if has_room:
            return 0.0
        if len(self._completions) < self.window:
            return None
        interval = (now - self._completions[0]) / self.window
        return (num_waiting + 1) * interval

    def admits(self, request: Request, *, num_waiting: int, has_room: bool, now: float) -> bool:
        """False, after rejecting `request` with its reason, if a bound is exceeded."""
        if self.max_queue is not None and num_waiting >= self.max_queue:
            request.reject(f"{QUEUE_FULL}: {num_waiting} requests already waiting at replica "
                           f"{request.replica} (max_queue={self.max_queue})", kind=QUEUE_FULL)
            return False
        if self.max_predicted_wait_s is None:
            return True
        wait = self.predicted_wait_s(num_waiting, has_room, now)
        if wait is not None and wait > self.max_predicted_wait_s:
            request.reject(
                f"{PREDICTED_WAIT}: {wait:.3g} s predicted at replica {request.replica} "
                f"({num_waiting} waiting ahead) exceeds max_predicted_wait_s="
                f"{self.max_predicted_wait_s}", kind=PREDICTED_WAIT,
            )
            return False
        return True

    def on_finished(self, count: int, now: float) -> None:
        for _ in range(count):
            self._completions.append(now)
            if len(self._completions) > self.window:
                self._completions.popleft()


@dataclass(slots=True)
class KVReserve:
    """SGLang-style conservative admission: reserve KV for part of every remaining decode."""

    assumed_max_new_tokens: int
    init_ratio: float = 0.7
    min_ratio: float = 0.098
    decay_steps: int = 600
    steps_since_preemption: int = 0
    # What a request reserves in the step that admits it (SGLang: 1); None: the ratio.
    admitted_share: float | None = None
    # Cap on the remaining-decode estimate (SGLang: 4,096); None: none.
    remaining_cap: int | None = None

    @property
    def ratio(self) -> float:
        """The current new-token ratio: a function of an integer step count, so exact under the
        fast path however the steps were grouped."""
        if not self.decays:
            return self.init_ratio
        if self.steps_since_preemption >= self.decay_steps:
            return self.min_ratio
        progress = self.steps_since_preemption / self.decay_steps
        return self.init_ratio - (self.init_ratio - self.min_ratio) * progress

    @property
    def decays(self) -> bool:
        return self.decay_steps > 0 and self.min_ratio < self.init_ratio

    def blocks_stretch(self, num_waiting: int) -> bool:
        """A decaying ratio may admit a waiting request at any step: step one by one then."""
        return self.decays and num_waiting > 0

    def blocks_needed(self, request: Request, pool: KVBlockPool, ratio: float) -> int:
        remaining = max(self.assumed_max_new_tokens - request.num_generated, 0)
        if self.remaining_cap is not None:
            remaining = min(remaining, self.remaining_cap)
        return pool.blocks_for(request.num_tokens + math.ceil(ratio * remaining))

    def reserved_blocks(self, running: Iterable[Request], pool: KVBlockPool, ratio: float) -> int:
        return sum(self.blocks_needed(r, pool, ratio) for r in running)

    def on_steps(self, steps: int, preempted: bool) -> None:
        """Decay over `steps` steps; a step that preempted resets the ratio to its initial value."""
        self.steps_since_preemption = 0 if preempted else self.steps_since_preemption + steps


class ReserveGate:
    """One step's view of a `KVReserve`: blocks already promised, and whether one more fits.

    A request is always admitted into an empty batch (it fits the whole cache, see
    `reject_if_never_fits`), so conservative admission can never stall a replica.
    """

    __slots__ = ("admitted_share", "batch_empty", "pool", "ratio", "reserve", "reserved")

    def __init__(self, reserve: KVReserve, running: list[Request], pool: KVBlockPool) -> None:
        self.reserve = reserve
        self.pool = pool
        self.ratio = reserve.ratio
        self.reserved = reserve.reserved_blocks(running, pool, self.ratio)
        self.batch_empty = not running
        share = reserve.admitted_share
        self.admitted_share = self.ratio if share is None else share

    def admit(self, request: Request) -> bool:
        need = self.reserve.blocks_needed(request, self.pool, self.admitted_share)
        if not self.batch_empty and self.reserved + need > self.pool.num_blocks:
            return False
        self.reserved += need
        self.batch_empty = False
        return True


def steps_applied(plan_requests: list[Request], contexts: list[int]) -> int:
    """Steps a plan ran before `on_step_done` applies its last: 1, plus any the fast path
    applied in bulk (each advanced every request of the decode-only plan by one token)."""
    if not plan_requests:
        return 1
    return 1 + plan_requests[0].num_computed_tokens - contexts[0]
