"""The two kinds of replica of disaggregated serving (DistServe, Splitwise), docs/design.md §4.

A prefill-pool replica runs an ordinary policy (continuous or chunked prefill) on *prefill
stages*: copies of the requests whose output is their first token. When a stage finishes, its
KV blocks stay held until the cluster (batchsim/sim/disaggregated.py) says its transfer has arrived.

A decode-pool replica runs continuous batching on requests that arrive prefilled. Each one goes
through three queues before it joins the batch: `pending` (waiting, in order, for free KV blocks
for its prompt), in flight (blocks reserved, its KV crossing the link) and `arrived` (KV here,
waiting for a batch slot). An arrived request already holds its context's blocks, so it joins
the running batch directly: it never waits behind a preempted request, which could otherwise
wait for the very blocks it holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from batchsim.policies.continuous import ContinuousBatching
from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepOutcome, StepPlan


def _always(_request: Request) -> bool:
    return True


def plan_past_preemptions(schedule: Callable[[], StepPlan]) -> StepPlan:
    """`schedule()`, again while it returns an empty plan that preempted.

    Blocks held outside the batch (a finished prefill's, waiting for its transfer; a decode
    replica's reserved or arrived transfers) can leave even the oldest running request short,
    so that it preempts itself. In a colocated policy that never happens (a request alone always
    fits), but here the plan would be empty, the step that preempted admits nobody, and an idle
    replica would not plan again. So plan again at once: the preempted requests wait at the
    head of the queue with nothing left running. The preemptions (and any swap) are charged to
    the plan that runs, so the step log counts them.
    """
    plan = schedule()
    preempted: list[Request] = []
    swap_tokens = 0
    while plan.is_empty and plan.preempted:  # each round preempts someone: it ends
        preempted += plan.preempted
        swap_tokens += plan.swap_tokens
        plan = schedule()
    plan.preempted[:0] = preempted
    plan.swap_tokens += swap_tokens
    return plan


class PrefillPool:
    """A prefill replica's policy: `inner` prefills stages; finished ones keep their KV."""

    def __init__(self, inner: BatchingPolicy) -> None:
        self.inner = inner
        self.pool = inner.pool
        self._keeps_kv: Callable[[Request], bool] = _always
        self._on_final_step: Callable[[Request], None] | None = None

    def connect(self, *, keeps_kv: Callable[[Request], bool],
                on_final_step: Callable[[Request], None] | None) -> None:
        """`keeps_kv(stage)`: hold its blocks for a transfer; `on_final_step(stage)`: called
        when a step that completes its prefill starts (layer-wise transfers start then)."""
        self._keeps_kv = keeps_kv
        self._on_final_step = on_final_step

    def add_request(self, request: Request, now: float) -> bool:
        return self.inner.add_request(request, now)

    def schedule(self, now: float) -> StepPlan:
        plan = plan_past_preemptions(lambda: self.inner.schedule(now))
        if self._on_final_step is not None:
            for request, tokens, computed in zip(plan.requests, plan.num_new_tokens,
                                                 plan.contexts, strict=True):
                if computed + tokens == request.num_tokens:
                    self._on_final_step(request)
        return plan

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        outcome = self.inner.on_step_done(plan, now)
        for stage in outcome.finished:
            # The inner policy freed the stage's blocks; take them back at once (nothing else
            # allocated in between) so that the step log shows them held.
            if self._keeps_kv(stage):
                held = self.pool.allocate(stage.request_id, stage.num_computed_tokens)
                assert held, "a finished prefill's blocks were taken before it could keep them"
        return outcome

    def release_kv(self, request_id: int) -> None:
        """The stage's KV has reached the decode pool."""
        self.pool.free(request_id)

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        return 1  # stages never decode, so the engine never asks

    def has_work(self) -> bool:
        return self.inner.has_work()

    def has_room(self) -> bool:
        return self.inner.has_room()

    @property
    def num_running(self) -> int:
        return self.inner.num_running

    @property
    def num_waiting(self) -> int:
        return self.inner.num_waiting


class DecodePool:
    """A decode replica's policy: reserves KV for incoming transfers, then decodes with
    continuous batching (`inner`, whose token budget must hold a recomputed request)."""

    def __init__(self, inner: ContinuousBatching) -> None:
        self.inner = inner
        self.pool = inner.pool
        self.pending: deque[Request] = deque()  # prefilled, waiting for KV blocks here
        self.in_flight = 0  # blocks reserved, KV on the link
        self.arrived: deque[Request] = deque()  # KV here, waiting for a batch slot
        self._on_reserved: Callable[[Request], None] | None = None
        self._on_join: Callable[[Request], None] | None = None
        self._recomputed = 0
        # Joined with a recomputed token and no first token yet: a step gives them their
        # first token, which a fast-path stretch (decodes of emitted requests) does not.
        self._unsampled: list[Request] = []

    def connect(self, on_reserved: Callable[[Request], None], *,
                on_join: Callable[[Request], None] | None = None,
                recomputed_tokens: int = 0) -> None:
        """`on_reserved(request)`: its blocks are reserved here, the transfer may start;
        `on_join(request)`: it joins the batch; `recomputed_tokens`: the last prompt tokens
        this replica computes again instead of keeping their KV (blocks are reserved for the
        rest: a request holds blocks for exactly its computed tokens)."""
        self._on_reserved = on_reserved
        self._on_join = on_join
        self._recomputed = recomputed_tokens

    def add_request(self, request: Request, now: float) -> bool:
        """A request prefilled (or being prefilled) elsewhere will come here."""
        self.pending.append(request)
        return True

    def receive(self, request: Request) -> None:
        """Its KV has arrived; it joins the batch at the next step with a free slot."""
        self.in_flight -= 1
        self.arrived.append(request)

    def schedule(self, now: float) -> StepPlan:
        plan = plan_past_preemptions(lambda: self._schedule_batch(now))
        # New transfers only with what running and preempted requests leave (vLLM's order:
        # running first; nothing new in a step that preempted, or while preempted ones wait).
        if not plan.preempted and not self.inner.num_waiting:
            self._reserve()
        return plan

    def _schedule_batch(self, now: float) -> StepPlan:
        self._join_batch()
        return self.inner.schedule(now)

    def _has_slot(self) -> bool:
        return len(self.inner.running) < self.inner.max_num_seqs

    def _join_batch(self) -> None:
        while self.arrived and self._has_slot():
            request = self.arrived.popleft()
            request.status = RequestStatus.RUNNING
            if self._recomputed:  # its first step recomputes them and samples the first token
                request.num_computed_tokens -= self._recomputed
                request.num_generated = 0
                self._unsampled.append(request)
            self.inner.running.append(request)  # holds its context's blocks: a decode
            if self._on_join is not None:
                self._on_join(request)

    def _reserve(self) -> None:
        """Blocks for the prompt of each pending request, in order, while they are free."""
        assert self._on_reserved is not None, "connect() the decode pool before running it"
        while self.pending:
            request = self.pending[0]
            if not self.pool.allocate(request.request_id,
                                      request.prompt_tokens - self._recomputed):
                return
            self.pending.popleft()
            self.in_flight += 1
            self._on_reserved(request)

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        outcome = self.inner.on_step_done(plan, now)
        if self._unsampled:
            self._unsampled = [r for r in self._unsampled
                               if not r.num_generated and not r.is_finished]
        return outcome

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        """As the inner policy, unless an arrived request could join at the next step or a
        joined one has yet to sample its first token. Pending requests stay blocked while the
        batch only decodes: free KV only shrinks."""
        if (self.arrived and self._has_slot()) or self._unsampled:
            return 1
        return self.inner.repeatable_steps(plan, horizon)

    def has_work(self) -> bool:
        return self.inner.has_work() or bool(self.pending or self.arrived)

    def has_room(self) -> bool:
        return self.inner.has_room()

    @property
    def num_running(self) -> int:
        return self.inner.num_running

    @property
    def num_waiting(self) -> int:
        return self.inner.num_waiting + len(self.pending) + self.in_flight + len(self.arrived)
