"""The SimPy engine: arrivals, a router, and one stepping process per replica (docs/design.md
§2)."""

from __future__ import annotations

import gc
import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from itertools import accumulate

import numpy as np
import simpy

from batchsim.sim.autoscaler import Autoscaler, AutoscalerSettings
from batchsim.sim.cost_protocol import StepCostModel
from batchsim.sim.dispatch import Dispatcher, RoutedDispatch, SharedQueueDispatch
from batchsim.sim.frontend import Frontend
from batchsim.sim.kv_cache import pool_block_keys
from batchsim.sim.kv_fragmentation import meter_for
from batchsim.sim.kv_growth import ExactGrowth, ListedGrowth
from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.recorder import RunRecord
from batchsim.sim.replica_pool import ReplicaPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.routers import Router, round_robin
from batchsim.sim.scored_dispatch import ScoredDispatch
from batchsim.sim.step_plan import StepPlan
from batchsim.sim.stretch import advance_decode_steps, decode_horizon, kv_growth
from batchsim.sim.token_meter import TokenMeter
from batchsim.sim.token_stream import TokenStream
from batchsim.sim.traffic import ClosedLoopTraffic, OpenLoopTraffic, SessionTraffic, Traffic
from batchsim.sim.weighted_router import WeightedRouter

# Progress is reported every this many steps of a replica (cheap enough, frequent enough).
_PROGRESS_EVERY_STEPS = 4096
# A closed-loop user whose requests are all rejected would loop forever at one instant.
_MAX_REJECTIONS_IN_A_ROW = 10_000


Process = Generator[simpy.Event, object, None]


class SimulationStalled(RuntimeError):
    """Requests were left neither finished nor rejected: a policy bug, never silently ignored."""


class Replica:
    """One model instance: a SimPy process that plans, times and applies steps."""

    def __init__(
        self, env: simpy.Environment, index: int, policy: BatchingPolicy,
        cost_model: StepCostModel, record: RunRecord, on_done: Callable[[Request], None],
        *, fast_path: bool = True, on_progress: Callable[[float], None] | None = None,
        on_state_change: Callable[[], None] | None = None, stream: TokenStream | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.policy = policy
        self.cost_model = cost_model
        self.record = record
        self.on_done = on_done
        self.fast_path = fast_path
        self.on_progress = on_progress
        self.on_state_change = on_state_change
        self._steps = 0
        self._kv_meter = meter_for(policy)
        if self._kv_meter is not None:
            record.kv_fragmentation.append(self._kv_meter)
        # A stretch in flight: step end times, cumulative blocks taken, free blocks and
        # uncached free blocks when it started.
        self._stretch: tuple[list[float], ExactGrowth | ListedGrowth, int, int] | None = None
        self._wake = env.event()
        # Busy (stepping) seconds before `_busy_since`, the start of the current busy spell
        # (None: idle): an autoscaler reads them at any instant, mid-stretch too.
        self._busy_s = 0.0
        self._busy_since: float | None = None
        # When the next arrival is known to come to this replica (set by the Simulation),
        # the time of it: a stretch is then priced only up to the step it lands in.
        self.next_arrival_s: Callable[[], float] | None = None
        # Seconds per emitted token, kept only for an autoscaled decode pool's `itl` signal.
        self.token_meter: TokenMeter | None = None
        # The API server streaming this replica's tokens back (None: clients see a token when
        # its step ends); `_shown_last`: when a stretch's last step's tokens are seen.
        self.stream = stream
        self._shown_last = 0.0
        env.process(self._run())

    def submit(self, request: Request) -> bool:
        request.replica = self.index
        accepted = self.policy.add_request(request, self.env.now)
        if accepted and not self._wake.triggered:
            self._wake.succeed()
        return accepted

    def wake(self) -> None:
        """Plan again now: something outside the policy changed what it may do (a KV transfer
        freed its blocks or delivered a request). Mid-stretch this cuts the stretch exactly as
        an arrival does."""
        if not self._wake.triggered:
            self._wake.succeed()

    def free_kv_blocks(self) -> int:
        """Free KV blocks now, as stepping one by one would have them mid-stretch."""
        if self._stretch is None:
            return self.policy.pool.num_free
        ends, growth, free_at_start, _ = self._stretch
        return free_at_start - self._blocks_taken_in_stretch(ends, growth)

    def _blocks_taken_in_stretch(self, ends: list[float],
                                 growth: ExactGrowth | ListedGrowth) -> int:
        # Steps whose start has passed have allocated their blocks.
        return growth.at(min(bisect_right(ends, self.env.now), len(ends) - 1))

    def cached_prefix_blocks(self, request: Request) -> int:
        """Leading prompt blocks of `request` cached here now (prefix caching), as stepping one
        by one would have them mid-stretch: the blocks taken beyond the uncached free ones
        have evicted the least recently used cached blocks."""
        pool = self.policy.pool
        limit = (request.prompt_tokens - 1) // pool.block_size
        return pool.cached_prefix_blocks(request.prefix_keys, limit,
                                         evicted=self._evicted_in_stretch())

    def _evicted_in_stretch(self) -> int:
        """Cached blocks the running stretch's growth has evicted by now, as stepping one by
        one would have."""
        if self._stretch is None:
            return 0
        ends, growth, _, uncached_at_start = self._stretch
        return max(0, self._blocks_taken_in_stretch(ends, growth) - uncached_at_start)

    def tiered_prefix_blocks(self, request: Request) -> int:
        """`cached_prefix_blocks` counting the blocks in the pool's lower KV tiers too."""
        pool = self.policy.pool
        limit = (request.prompt_tokens - 1) // pool.block_size
        return pool.tiered_prefix_blocks(request.prefix_keys, limit,
                                         evicted=self._evicted_in_stretch())

    def busy_seconds(self, now: float) -> float:
        """Seconds spent stepping up to `now`; a spell of back-to-back steps counts from its
        first start, so a stretch and the steps it stands for count alike."""
        since = self._busy_since
        return self._busy_s if since is None else self._busy_s + (now - since)

    def _stop_busy(self) -> None:
        if self._busy_since is not None:
            self._busy_s += self.env.now - self._busy_since
            self._busy_since = None

    def _idle(self, wake_at: float | None) -> simpy.Event:
        self._stop_busy()
        if wake_at is None:
            return self._wake
        return self._wake | self.env.timeout(max(0.0, wake_at - self.env.now))

    def _run(self) -> Process:
        env = self.env
        while True:
            if not self.policy.has_work():
                self._stop_busy()
                yield self._wake
                self._wake = env.event()
                continue
            plan = self.policy.schedule(env.now)
            if self.on_state_change is not None:
                self.on_state_change()  # admission may have made room for queued requests
            if plan.is_empty:
                yield self._idle(plan.wake_at)
                if self._wake.triggered:
                    self._wake = env.event()
                continue
            if self._busy_since is None:
                self._busy_since = env.now
            steps = self._repeatable_steps(plan)
            if steps > 1:
                yield from self._run_stretch(plan, steps)
            else:
                yield from self._run_step(plan)

    def _repeatable_steps(self, plan: StepPlan) -> int:
        """How many steps the fast path may take in one event (1: step normally)."""
        if not self.fast_path or plan.preempted or plan.swap_tokens or plan.load_seconds:
            return 1
        horizon = decode_horizon(plan)
        return self.policy.repeatable_steps(plan, horizon) if horizon > 1 else 1

    def _run_step(self, plan: StepPlan) -> Process:
        start = self.env.now
        if plan.verifying is None:  # priced from the plan's lists (see `step_seconds`)
            duration = self.cost_model.step_seconds(*plan.cost_lists(), plan.num_emitting)
        else:  # speculative verification
            duration = self.cost_model.step_time(
                plan.cost_new_tokens, plan.cost_context_tokens, plan.num_emitting,
                plan.verifying).seconds
        if plan.load_seconds:  # prefix hits loaded from lower KV tiers
            duration = plan.with_loads(duration)
        if plan.swap_tokens:
            duration += self.cost_model.swap_time(plan.swap_tokens)
        duration += plan.draft_seconds  # speculative decoding's drafter runs first
        yield self.env.timeout(duration)
        self._finish_step(plan, start, duration)

    def _run_stretch(self, plan: StepPlan, steps: int) -> Process:
        """Up to `steps` decode steps in one event, cut short exactly by an arrival.

        An arrival during step j joins the batch at the end of step j, as it would stepping one
        by one, so the stretch stops there: steps 0..j-1 are applied in bulk, step j normally.
        """
        env = self.env
        start = env.now
        arrival = math.inf if self.next_arrival_s is None else self.next_arrival_s()
        # Plain floats throughout: a stretch is a few dozen steps, where list operations cost
        # less than numpy calls. (And SimPy's clock must not carry numpy scalars: they would
        # make all later time arithmetic several times slower.)
        durations = self.cost_model.decode_step_list(*plan.cost_lists(), plan.num_emitting,
                                                     steps, arrival - start)
        ends = list(accumulate(durations, initial=start))  # sequential sums, as a cumsum
        del ends[0]
        if arrival <= ends[-1]:
            # The next arrival cuts the stretch at the end of the step it lands in: the
            # stretch is planned that long. (Should it not come here after all — rejected on
            # arrival — the replica plans again at that step's end, as after any stretch.)
            steps = bisect_left(ends, arrival) + 1
            del ends[steps:], durations[steps:]
        waiting = self.policy.num_waiting  # constant until the arrival that ends the stretch
        external = 0 if self._kv_meter is None else self._kv_meter.external_now()  # likewise
        growth = kv_growth(plan, self.policy.pool, steps)
        pool = self.policy.pool
        self._stretch = (ends, growth, pool.num_free, pool.num_free_uncached)
        if self.stream is not None:  # one message per request (a padding slot sends none)
            self.stream.stretch_started(ends, len(plan.requests))
        if self.token_meter is not None:
            self.token_meter.stretch_started(start, ends, plan.num_emitting)
        self._wake = env.event()
        last_end = ends[-1]
        yield _first_of(env, self._wake, env.timeout(last_end - start))
        if env.now < last_end:  # woken by an arrival
            steps = bisect_left(ends, env.now) + 1
            step_end = ends[steps - 1]
            if step_end > env.now:
                yield env.timeout(step_end - env.now)
        self._stretch = None
        if self.token_meter is not None:
            self.token_meter.stretch_applied(steps - 1)
        shown = None if self.stream is None else self.stream.stretch_done(steps)
        if steps == 1:
            if shown is not None:
                self._shown_last = shown[0]
            self._finish_step(plan, start, durations[0], tokens_streamed=shown is not None)
            return
        # The steps before the last in bulk, with the last step's tokens (its gaps are the
        # batch's, like the steps' before it); then the last step through the policy.
        kv_used = growth.cumulative(steps - 1, initial=pool.num_used)
        if self._kv_meter is not None:
            self._kv_meter.sample_stretch(len(plan.requests), kv_used, durations[: steps - 1],
                                          external)
        if shown is not None:
            self._shown_last = shown[-1]
        advance_decode_steps(
            plan, ends[: steps - 1], durations[: steps - 1], kv_used,
            pool=pool, record=self.record, replica=self.index,
            num_waiting=waiting, last_end=env.now, shown=shown,
        )
        self._steps += steps - 1
        self._finish_step(plan, ends[steps - 2], durations[steps - 1], tokens_recorded=True,
                          tokens_streamed=shown is not None)

    def _finish_step(self, plan: StepPlan, start: float, duration: float,
                     tokens_recorded: bool = False, tokens_streamed: bool = False) -> None:
        """Apply the step that just ended, record it, and hand finished requests back
        (`tokens_recorded`: a stretch's last step, whose tokens `advance_decode_steps`
        recorded; `tokens_streamed`: a stretch's last step, streamed with the stretch and seen
        at `_shown_last`)."""
        now = self.env.now
        policy, record = self.policy, self.record
        outcome = policy.on_step_done(plan, now)
        shown = now  # when the step's tokens reach their clients
        if self.stream is not None:
            shown = (self._shown_last if tokens_streamed
                     else self.stream.shown(now, len(outcome.emitted)))
        if not tokens_recorded:
            record.record_tokens(outcome.emitted, shown)
        record.steps.append(
            start, duration, self.index, len(plan.requests),
            plan.total_new_tokens + plan.verified_tokens, outcome.num_tokens,
            policy.pool.num_used, policy.num_waiting, len(plan.preempted),
        )
        if record.step_trace is not None:
            record.step_trace.step(plan, start, duration, self.index)
        if self._kv_meter is not None:
            self._kv_meter.sample(duration)
        if self.token_meter is not None:
            self.token_meter.step(plan.num_emitting, duration)
        for request in outcome.finished:
            request.finish_s = shown
            if shown > now:  # the client sees the end once its last token is streamed
                self._done_later(request, shown - now)
            else:
                self.on_done(request)
        if self.on_state_change is not None:
            self.on_state_change()
        self._steps += 1
        if self.on_progress is not None and self._steps % _PROGRESS_EVERY_STEPS == 0:
            self.on_progress(now)

    def _done_later(self, request: Request, delay: float) -> None:
        self.env.timeout(delay).callbacks.append(lambda _: self.on_done(request))


def _first_of(env: simpy.Environment, wake: simpy.Event, timeout: simpy.Event) -> simpy.Event:
    """`wake | timeout` (SimPy's AnyOf) without its bookkeeping: an event that succeeds when
    the first of the two is processed. It schedules exactly what AnyOf schedules, in the same
    order (itself, once, when the first of the two is processed), so simultaneous events keep
    their order; it is cheaper because a stretch waits on one at every scheduling event."""
    first = env.event()

    def fire(_: simpy.Event) -> None:
        if not first.triggered:
            first.succeed()

    # The second event, processed later, finds `first` triggered and does nothing: the
    # callback may stay on it (AnyOf removes its own; the difference is unobservable).
    wake.callbacks.append(fire)
    timeout.callbacks.append(fire)
    return first


# The cyclic garbage collector's thresholds while simulating (the default is (700, 10, 10)).
_GC_THRESHOLDS = (100_000, 10, 10)


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Collect cyclic garbage less often while simulating. A run allocates millions of objects
    that live to its end (requests, log columns) and almost no reference cycles, so the
    collector's frequent scans of the young objects are wasted work (docs/performance.md,
    item 18). Garbage is still collected, in the same generations, in larger batches; the
    thresholds are restored after."""
    previous = gc.get_threshold()
    gc.set_threshold(*_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


class Simulation:
    """Wires traffic, router and replicas; `run()` simulates until every request has ended.

    `frontend`: the serving engine's front end (sim/frontend.py). A request is sent by its
    client at `arrival_s` and reaches the router when the front end is done with it, so that
    time is part of every client-seen latency (TTFT, E2E) and of a closed-loop user's cycle.
    With `streams`, each replica's tokens go back through a streaming server of its own when
    the front end's `stream_s` is set (a disaggregated deployment's decode replicas do that
    themselves).

    `autoscaler`: the policies are the pool's slots (sim/replica_pool.py), of which the
    initial ones serve; the dispatcher routes among the serving ones only.
    """

    def __init__(
        self, policies: Sequence[BatchingPolicy], cost_model: StepCostModel,
        traffic: Traffic, router: Router | WeightedRouter | None = None,
        max_model_len: int | None = None,
        fast_path: bool = True, on_progress: Callable[[float], None] | None = None,
        shared_queue: bool = False, frontend: Frontend | None = None,
        autoscaler: AutoscalerSettings | None = None, streams: bool = True,
    ) -> None:
        self.env = simpy.Environment()
        self.frontend = frontend or Frontend()
        self._sending = 0  # requests sent by closed-loop clients, not yet at the router
        self.record = RunRecord(
            kv_blocks_per_replica=policies[0].pool.num_blocks, num_replicas=len(policies)
        )
        self.dispatch: Dispatcher
        pump = self._pump if shared_queue else None
        self.replicas = [
            Replica(self.env, i, p, cost_model, self.record, self._on_done,
                    fast_path=fast_path, on_progress=on_progress, on_state_change=pump,
                    stream=self.frontend.stream(i) if streams else None)
            for i, p in enumerate(policies)
        ]
        routable: Sequence[Replica] = self.replicas
        self.pool: ReplicaPool | None = None
        if autoscaler is not None:
            self.pool = ReplicaPool(self.env, self.replicas, autoscaler.initial_replicas,
                                    autoscaler.cold_start_s, self._pump)
            routable = self.pool.routable  # type: ignore[assignment]  # the same replicas
        if shared_queue:
            self.dispatch = SharedQueueDispatch(routable, self._rejected)
        elif isinstance(router, WeightedRouter):
            self.dispatch = ScoredDispatch(self.env, routable, router, self._rejected)
        else:
            self.dispatch = RoutedDispatch(routable, router or round_robin, self._rejected)
        self.autoscaler = None if self.pool is None or autoscaler is None else Autoscaler(
            self.env, autoscaler, self.pool, self.replicas, self.dispatch.held, self._finished)
        self._sources: list[simpy.Process] = []  # the traffic's processes
        self.traffic = traffic
        self.max_model_len = max_model_len
        self._done_events: dict[int, simpy.Event] = {}
        self._progress = self.env.event()  # succeeds at the first finish while waited on
        self._upcoming_arrival_s = math.inf  # open loop: the next arrival not yet submitted
        self._not_ended = 0  # requests that reached the router and have not ended
        self._drained: simpy.Event | None = None  # a closed loop's warm-up drained

    def _next_arrival_s(self) -> float:
        return self._upcoming_arrival_s

    def run(self) -> RunRecord:
        if isinstance(self.traffic, OpenLoopTraffic):
            if len(self.replicas) == 1 and isinstance(self.dispatch, RoutedDispatch):
                # Every arrival comes to the lone replica and cuts its stretch.
                self.replicas[0].next_arrival_s = self._next_arrival_s
            self._sources = [self.env.process(self._open_loop(self.traffic))]
        elif isinstance(self.traffic, SessionTraffic):
            self._sources = [self.env.process(self._session(self.traffic, session))
                             for session in range(self.traffic.sessions.start_s.size)]
        else:
            self._sources = self._start_closed_loop(self.traffic)
        if self.autoscaler is not None:
            self.autoscaler.start()
        with _fewer_collections():
            self.env.run()
        unfinished = [r.request_id for r in self.record.requests if not r.is_finished]
        if unfinished:
            raise SimulationStalled(
                f"{len(unfinished)} requests never finished (first ids {unfinished[:5]})"
            )
        return self.record

    def _finished(self) -> bool:
        """No request will come and none is left: an autoscaler stops evaluating."""
        return not any(p.is_alive for p in self._sources) and self._in_system() == 0

    def _in_system(self) -> int:
        """Requests at the replicas (queued or running) or held by the dispatcher, read at
        every arrival and finish: kept as a count (every request that reached the router,
        less those that ended) rather than summed over the replicas. Policies reject a
        request only when it arrives, so a request that has not ended is at a replica or
        held. (Between one step's finishes the sum had already dropped them all; the
        occupancy series keeps only the last value at an instant, the same either way.)"""
        return self._not_ended

    def _submit(self, prompt: int, output: int, tenant: int = 0, priority: int = 0,
                prefix: tuple[np.ndarray, int] | None = None,
                sent_s: float | None = None) -> Request:
        """A request reaching the router now; its client sent it at `sent_s` (default now)."""
        request = Request(len(self.record.requests), self.env.now if sent_s is None else sent_s,
                          prompt, output, tenant=tenant, priority=priority)
        pool = self.replicas[0].policy.pool
        if prefix is not None and pool.prefix_caching:
            request.prefix_keys = pool_block_keys(prefix[0], prefix[1], pool.block_size, prompt)
        self.record.add_request(request)
        self._not_ended += 1
        if self.max_model_len is not None and prompt + output > self.max_model_len:
            request.replica = -1
            request.reject(f"prompt+output of {prompt + output} tokens exceeds max_model_len="
                           f"{self.max_model_len}", kind="max_model_len")
            self._rejected(request)
            return request
        self.dispatch.arrive(request)
        if self.autoscaler is not None and self.dispatch.held():
            self.autoscaler.wake_from_zero()
        if not request.is_finished:
            self.record.record_occupancy(self.env.now, self._in_system())
        return request

    def _rejected(self, request: Request) -> None:
        request.finish_s = self.env.now
        self._on_done(request)

    def _pump(self) -> None:
        """A replica admitted or finished requests: the shared queue may hand out more."""
        held = self.dispatch.held()
        self.dispatch.pump()
        if self.dispatch.held() != held:
            self.record.record_occupancy(self.env.now, self._in_system())

    def _on_done(self, request: Request) -> None:
        self._not_ended -= 1
        self.record.request_done(request)
        if self.pool is not None and 0 <= request.replica < len(self.replicas):
            # A draining replica may stop (a disaggregated arm's decode replicas come after
            # the routed ones and have a pool of their own).
            self.pool.request_ended(request.replica)
        if request.status is not RequestStatus.REJECTED:
            self.record.record_occupancy(self.env.now, self._in_system())
            # Only a closed-loop user retrying after a rejection waits on it: with no one
            # waiting, succeeding would schedule an event whose processing does nothing (one
            # per finished request), so the untriggered event is kept for a later waiter.
            if self._progress.callbacks and not self._progress.triggered:
                self._progress.succeed()
                self._progress = self.env.event()
        event = self._done_events.pop(request.request_id, None)
        if event is not None:
            event.succeed()
        drained = self._drained
        if drained is not None and not drained.triggered and self._not_ended == 0 \
                and self._sending == 0:
            drained.succeed()

    def _open_loop(self, traffic: OpenLoopTraffic) -> Process:
        arrival_s = traffic.arrival_s.tolist()
        submit = self._open_loop_submitter(traffic)
        if self.frontend.delays:
            yield from self._open_loop_through_frontend(arrival_s, submit)
            return
        for index, t in enumerate(arrival_s):
            if t > self.env.now:
                self._upcoming_arrival_s = t
                yield self.env.timeout(t - self.env.now)
            submit(index, t)
        self._upcoming_arrival_s = math.inf

    def _open_loop_through_frontend(self, arrival_s: list[float],
                                    submit: Callable[[int, float], None]) -> Process:
        """Each request taken in by the front end at its send time, in order with the tokens
        its server streams back, and handed to the router when it reaches the scheduler. They
        reach it in send order: every server's free time only grows and a request takes the
        first one free, so none finishes its serial part before one sent earlier."""
        frontend, sends = self.frontend, len(arrival_s)
        in_flight: deque[tuple[float, int]] = deque()  # (reaches the scheduler at, index)
        # No request sent at t reaches the scheduler before this long after t.
        soonest_s = frontend.serial_s + frontend.latency_s
        index = 0
        while index < sends or in_flight:
            send_s = arrival_s[index] if index < sends else math.inf
            reach_s = in_flight[0][0] if in_flight else math.inf
            if reach_s <= send_s:
                if reach_s > self.env.now:
                    self._upcoming_arrival_s = reach_s
                    yield self.env.timeout(reach_s - self.env.now)
                sent = in_flight.popleft()[1]
                submit(sent, arrival_s[sent])
                continue
            if send_s > self.env.now:
                self._upcoming_arrival_s = min(reach_s, send_s + soonest_s)
                yield self.env.timeout(send_s - self.env.now)
            in_flight.append((frontend.reaches_scheduler(send_s), index))
            index += 1
        self._upcoming_arrival_s = math.inf

    def _open_loop_submitter(self, traffic: OpenLoopTraffic) -> Callable[[int, float], None]:
        """`submit(index, sent_s)`: request `index` of the traffic reaching the router now."""
        zeros = [0] * traffic.arrival_s.size
        prompts, outputs = traffic.prompt_tokens.tolist(), traffic.output_tokens.tolist()
        tenants = zeros if traffic.tenant is None else traffic.tenant.tolist()
        priorities = zeros if traffic.priority is None else traffic.priority.tolist()
        blocks = traffic.prefix_blocks

        def submit(index: int, sent_s: float) -> None:
            prefix = None if blocks is None else (blocks.blocks_of(index), blocks.block_tokens)
            self._submit(prompts[index], outputs[index], tenants[index], priorities[index],
                         prefix, sent_s=sent_s)
        return submit

    def _start_closed_loop(self, traffic: ClosedLoopTraffic) -> list[simpy.Process]:
        lengths = traffic.lengths()
        entries = None if traffic.prompt_entries is None else traffic.prompt_entries()
        return [self.env.process(self._user(traffic, lengths, entries))
                for _ in range(traffic.concurrency)]

    def _session(self, traffic: SessionTraffic, session: int) -> Process:
        """One conversation: its turns in order, each after the previous one ended (a turn
        rejected on arrival ends too) and the think time."""
        sessions = traffic.sessions
        yield self.env.timeout(float(sessions.start_s[session]))
        for turn in sessions.turns_of(session).tolist():
            if not self._may_send(traffic):
                return
            blocks = sessions.prefix_blocks
            sent = self.env.now
            if self.frontend.delays:
                yield from self._through_frontend()
            request = self._submit(int(sessions.prompt_tokens[turn]),
                                   int(sessions.output_tokens[turn]),
                                   prefix=(blocks.blocks_of(turn), blocks.block_tokens),
                                   sent_s=sent)
            if not request.is_finished:
                done = self.env.event()
                self._done_events[request.request_id] = done
                yield done
            if traffic.think_time_s > 0:
                yield self.env.timeout(traffic.think_time_s)

    def _through_frontend(self) -> Process:
        """A sent request on its way to the router: counted as sent, so no other user sends
        one too many (`num_requests`)."""
        self._sending += 1
        yield self.env.timeout(self.frontend.reaches_scheduler(self.env.now) - self.env.now)
        self._sending -= 1

    def _warming_up(self, drain_after: int) -> bool:
        """Whether a user must wait for the warm-up to drain: `drain_after` requests were
        sent and some have not ended. Made once, the first time it is asked with all sent."""
        if self._drained is None:
            if len(self.record.requests) + self._sending < drain_after:
                return False
            self._drained = self.env.event()
            if self._not_ended == 0 and self._sending == 0:
                self._drained.succeed()
        return not self._drained.triggered

    def _may_send(self, traffic: ClosedLoopTraffic | SessionTraffic) -> bool:
        sent = len(self.record.requests) + self._sending
        if traffic.num_requests is not None and sent >= traffic.num_requests:
            return False
        return traffic.duration_s is None or self.env.now < traffic.duration_s

    def _user(
        self, traffic: ClosedLoopTraffic, lengths: Iterator[tuple[int, int]],
        entries: Iterator[int] | None = None,
    ) -> Process:
        rejected_in_a_row = 0
        while self._may_send(traffic):
            if traffic.drain_after is not None and self._warming_up(traffic.drain_after):
                assert self._drained is not None  # made by _warming_up
                yield self._drained
                continue
            prompt, output = next(lengths)
            # A pooled prompt is named by its entry alone: one block id spanning the prompt.
            prefix = None if entries is None else (np.array([next(entries)]), prompt)
            done = self.env.event()
            sent = self.env.now
            if self.frontend.delays:
                yield from self._through_frontend()
            request = self._submit(prompt, output, prefix=prefix, sent_s=sent)
            if request.is_finished:  # rejected on arrival
                rejected_in_a_row += 1
                if rejected_in_a_row >= _MAX_REJECTIONS_IN_A_ROW:
                    raise SimulationStalled(
                        f"closed-loop user got {rejected_in_a_row} rejections in a row "
                        f"(last: {request.reject_reason}); no request can be served"
                    )
                if self._in_system():
                    # Retry once the system has made progress (a request finished), not in
                    # a loop at the same instant against an unchanged full queue.
                    yield self._progress
                continue
            rejected_in_a_row = 0
            self._done_events[request.request_id] = done
            yield done
            if traffic.think_time_s > 0:
                yield self.env.timeout(traffic.think_time_s)
