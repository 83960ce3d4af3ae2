"""Disaggregated serving (DistServe, Splitwise; docs/design.md §2): a prefill pool, a KV link, a
decode
pool.

Each arrival becomes a *prefill stage* — a copy of the request whose output is its first token —
routed to a prefill replica by the experiment's router. The stage's first token is the request's
first token (TTFT). A request with more output then moves to a decode replica (the one with the
fewest requests, then the most free KV blocks): it queues there until that replica has free
blocks for its prompt, its KV crosses the link (latency + bytes / shared bandwidth), and it joins
the decode batch. The prefill replica keeps the request's blocks until the transfer has arrived.

With `layerwise`, the KV of each layer leaves as soon as it is computed: the decode replica is
chosen when the step that completes the prefill starts, and once its blocks are reserved all
but the last layer's share of the bytes (1 / num_layers) may cross during that step; the last
layer's share follows when the step ends. Bytes cannot leave before a destination is reserved,
so a transfer reserved after the prefill ended is sent whole.

Where the client sees the first token is the engine's (`first_token`, docs/background/engines.md
"Disaggregated deployments"): `prefill`, the prefill stage's token as it is computed; `transfer`,
the decode replica streams that token when the request joins its batch, after the KV hand-off;
`recompute`, the decode replica keeps all but the last prompt token's KV, recomputes that token
in the request's first step there and samples the first token from it (the stage's is dropped).
A one-token answer ends with its prefill stage, whatever the rule.

A request that could never fit a decode replica's cache is rejected on arrival, with a reason.

With `prefill_scaler` and `decode_scaler` each pool is a replica pool of its own
(sim/replica_pool.py) resized by its own autoscaler (sim/autoscaler.py, sim/pool_signals.py):
arrivals go to the serving prefill replicas, prefilled requests to the serving decode
replicas. A draining prefill replica finishes its prompts and stops once their KV has crossed
the link; a draining decode replica finishes every request it holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from batchsim.sim.autoscaler import Autoscaler, AutoscalerSettings
from batchsim.sim.cost_protocol import StepCostModel
from batchsim.sim.dispatch import Dispatcher
from batchsim.sim.engine import Replica, Simulation
from batchsim.sim.frontend import Frontend
from batchsim.sim.kv_link import KVLinks
from batchsim.sim.policy_protocol import BatchingPolicy
from batchsim.sim.pool_signals import FirstTokenSignal, kv_use, seconds_per_token
from batchsim.sim.recorder import RunRecord
from batchsim.sim.replica_pool import ReplicaPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.routers import Router
from batchsim.sim.token_meter import TokenMeter
from batchsim.sim.traffic import Traffic
from batchsim.sim.weighted_router import WeightedRouter

DECODE_KV_TOO_SMALL = "decode_kv_cache_too_small"

HandoffFirstToken = Literal["prefill", "transfer", "recompute"]


class PrefillPoolPolicy(BatchingPolicy, Protocol):
    """A prefill replica's policy (policies/disaggregated.py: PrefillPool)."""

    def connect(self, *, keeps_kv: Callable[[Request], bool],
                on_final_step: Callable[[Request], None] | None) -> None: ...

    def release_kv(self, request_id: int) -> None: ...


class DecodePoolPolicy(BatchingPolicy, Protocol):
    """A decode replica's policy (policies/disaggregated.py: DecodePool)."""

    def connect(self, on_reserved: Callable[[Request], None], *,
                on_join: Callable[[Request], None] | None = None,
                recomputed_tokens: int = 0) -> None: ...

    def receive(self, request: Request) -> None: ...


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """The KV link: bandwidth in bytes/s (math.inf: unlimited), latency, pipelining, and
    whether every transfer shares it or each prefill replica has its own (its NICs)."""

    bandwidth_bytes_s: float
    latency_s: float
    layerwise: bool
    num_layers: int  # the pipeline's depth with `layerwise`
    kv_bytes_per_token: float  # of the whole model: what one prompt token sends
    per_prefill_replica: bool = False


@dataclass(slots=True)
class Handoff:
    """One request's passage from the prefill pool to the decode pool (times in seconds)."""

    request: Request
    stage: Request
    num_bytes: float
    prefill_replica: int = -1
    decode_replica: int = -1  # index in the record (prefill replicas come first)
    prefill_token_s: float = math.nan  # the prefill stage's first token
    prefill_done: bool = False
    first_part_sent: bool = False  # layer-wise: all but the last layer's share has left
    transfer_start_s: float = math.nan
    transfer_end_s: float = math.nan


class _StagedDispatch:
    """Hands each arrival to `arrive` (which sends its prefill stage to the real dispatch)."""

    def __init__(self, inner: Dispatcher, arrive: Callable[[Request], None]) -> None:
        self.inner = inner
        self._arrive = arrive

    def arrive(self, request: Request) -> None:
        self._arrive(request)

    def pump(self) -> None:
        self.inner.pump()

    def held(self) -> int:
        return self.inner.held()


class DisaggregatedSimulation(Simulation):
    """A Simulation whose routed replicas are the prefill pool, plus a decode pool and a link."""

    def __init__(
        self, prefill: Sequence[PrefillPoolPolicy], decode: Sequence[DecodePoolPolicy], *,
        prefill_cost: StepCostModel, decode_cost: StepCostModel, link: LinkSpec,
        traffic: Traffic, router: Router | WeightedRouter | None = None,
        shared_queue: bool = False,
        max_model_len: int | None = None, fast_path: bool = True,
        on_progress: Callable[[float], None] | None = None, frontend: Frontend | None = None,
        prefill_scaler: AutoscalerSettings | None = None,
        decode_scaler: AutoscalerSettings | None = None,
        first_token: HandoffFirstToken = "prefill",
    ) -> None:
        super().__init__(prefill, prefill_cost, traffic, router, max_model_len=max_model_len,
                         fast_path=fast_path, on_progress=on_progress, shared_queue=shared_queue,
                         frontend=frontend, autoscaler=prefill_scaler, streams=False)
        self.spec = link
        first = len(self.replicas)
        self.links = KVLinks(self.env, bandwidth_bytes_s=link.bandwidth_bytes_s,
                             latency_s=link.latency_s, shared=not link.per_prefill_replica,
                             prefill_replicas=first)
        self.decode_replicas = [
            Replica(self.env, first + i, policy, decode_cost, self.record, self._on_done,
                    fast_path=fast_path, on_progress=on_progress,
                    stream=self.frontend.stream(self.frontend.intake_servers + i))
            for i, policy in enumerate(decode)
        ]
        self.record.num_replicas = first + len(decode)
        self.record.kv_blocks_by_replica = [p.pool.num_blocks for p in (*prefill, *decode)]
        self.handoffs: dict[int, Handoff] = {}  # every request's, kept for the outputs
        self._prefill = list(prefill)
        self._decode = list(decode)
        self._in_system_now = 0  # requests that passed `_arrive` and have not ended
        self._stage_dispatch = self.dispatch
        self.dispatch = _StagedDispatch(self.dispatch, self._arrive)
        on_final = self._final_step_starts if link.layerwise else None
        for policy in prefill:
            policy.connect(keeps_kv=self._keeps_kv, on_final_step=on_final)
        self.first_token = first_token
        for d in decode:
            d.connect(self._start_transfer,
                      on_join=self._joined if first_token == "transfer" else None,
                      recomputed_tokens=int(first_token == "recompute"))
        self._kv_kept = [0] * len(prefill)  # per prefill replica: finished prompts' KV held
        self.first_tokens: FirstTokenSignal | None = None
        if self.pool is not None and self.autoscaler is not None:
            self._scale_prefill(self.pool, self.autoscaler)
        self.decode_pool: ReplicaPool | None = None
        self.decode_autoscaler: Autoscaler | None = None
        self._decode_routable: Sequence[Replica] = self.decode_replicas
        if decode_scaler is not None:
            self._scale_decode(decode_scaler)

    # --- the pools' scalers -------------------------------------------------------------------

    def _scale_prefill(self, pool: ReplicaPool, autoscaler: Autoscaler) -> None:
        pool.holds = self._prefill_holds
        if autoscaler.settings.metric == "ttft":
            self.first_tokens = FirstTokenSignal(self.env)
            autoscaler.signal = self.first_tokens.read

    def _prefill_holds(self, slot: int) -> bool:
        policy = self._prefill[slot]
        return policy.num_running + policy.num_waiting > 0 or self._kv_kept[slot] > 0

    def _scale_decode(self, settings: AutoscalerSettings) -> None:
        replicas = self.decode_replicas
        pool = ReplicaPool(self.env, replicas, settings.initial_replicas,
                           settings.cold_start_s, on_serving=lambda: None)
        signal: Callable[[], float] | None = None
        if settings.metric == "itl":
            for replica in replicas:
                replica.token_meter = TokenMeter()
            signal = seconds_per_token(self.env, replicas)
        elif settings.metric == "kv_utilization":
            signal = kv_use(replicas, pool)
        self.decode_pool = pool
        self._decode_routable = pool.routable  # type: ignore[assignment]  # the same replicas
        self.decode_autoscaler = Autoscaler(self.env, settings, pool, replicas,
                                            held=lambda: 0, finished=self._finished,
                                            signal=signal)

    def run(self) -> RunRecord:
        if self.decode_autoscaler is not None:
            self.decode_autoscaler.start()
        return super().run()

    # --- arrival and the prefill stage --------------------------------------------------------

    def _arrive(self, request: Request) -> None:
        decode_pool = self.decode_replicas[0].policy.pool
        need = decode_pool.blocks_for(request.prompt_tokens + request.output_tokens)
        if need > decode_pool.num_blocks:
            request.replica = -1
            request.reject(f"needs {need} KV blocks for prompt+output, a decode replica has "
                           f"{decode_pool.num_blocks}", kind=DECODE_KV_TOO_SMALL)
            self._rejected(request)
            return
        stage = replace(request, output_tokens=1)  # every other field, tenant included, kept
        self.handoffs[request.request_id] = Handoff(
            request, stage, request.prompt_tokens * self.spec.kv_bytes_per_token)
        self._in_system_now += 1
        if self.first_tokens is not None:
            self.first_tokens.arrived(request.request_id, request.arrival_s)
        self._stage_dispatch.arrive(stage)

    def _keeps_kv(self, stage: Request) -> bool:
        return self.handoffs[stage.request_id].request.output_tokens > 1

    def _final_step_starts(self, stage: Request) -> None:
        handoff = self.handoffs[stage.request_id]
        if handoff.request.output_tokens > 1 and handoff.decode_replica < 0:
            self._route(handoff)

    def _on_done(self, request: Request) -> None:
        handoff = self.handoffs.get(request.request_id)
        if handoff is not None and request is handoff.stage:
            self._stage_done(handoff)
            return
        if handoff is not None:
            self._in_system_now -= 1
            if self.decode_pool is not None and handoff.decode_replica >= 0:
                self.decode_pool.request_ended(handoff.decode_replica - len(self.replicas))
        super()._on_done(request)

    def _stage_done(self, handoff: Handoff) -> None:
        """The prefill stage finished (its first token is the request's) or was rejected."""
        stage, request = handoff.stage, handoff.request
        request.replica = handoff.prefill_replica = stage.replica
        if stage.status is RequestStatus.REJECTED:
            if self.first_tokens is not None:
                self.first_tokens.dropped(request.request_id)
            request.reject(f"prefill pool: {stage.reject_reason}", kind=stage.reject_kind)
            self._rejected(request)
            return
        if self.first_tokens is not None:
            assert stage.first_token_s is not None  # a finished stage emitted its token
            self.first_tokens.first_token(request.request_id, stage.first_token_s)
        if self.pool is not None:
            self._kv_kept[stage.replica] += request.output_tokens > 1
            self.pool.request_ended(stage.replica)  # a draining prefill replica may stop
        request.first_scheduled_s = stage.first_scheduled_s
        handoff.prefill_token_s = stage.first_token_s
        request.num_computed_tokens = stage.num_computed_tokens
        request.num_generated = stage.num_generated
        # Otherwise the decode replica sets it: as it joins (`transfer`), or in its first step
        # there (`recompute`, DecodePool._join_batch).
        if self.first_token == "prefill" or request.output_tokens == 1:
            request.first_token_s = request.last_token_s = stage.first_token_s
        request.preemptions += stage.preemptions
        request.recomputed_tokens += stage.recomputed_tokens
        handoff.prefill_done = True
        if request.output_tokens == 1:  # the first token was the whole answer
            request.status = RequestStatus.FINISHED
            request.finish_s = self.env.now
            self._on_done(request)
        elif handoff.decode_replica < 0:
            self._route(handoff)
        elif handoff.first_part_sent:
            self._send_last_layer(handoff)

    # --- decode side and the link -------------------------------------------------------------

    def _route(self, handoff: Handoff) -> None:
        """To the decode replica with the fewest requests, then the most free KV blocks."""
        def load(replica: Replica) -> tuple[int, int, int]:
            policy = replica.policy
            return (policy.num_running + policy.num_waiting, -replica.free_kv_blocks(),
                    replica.index)

        target = min(self._decode_routable, key=load)
        handoff.decode_replica = target.index
        target.submit(handoff.request)

    def _start_transfer(self, request: Request) -> None:
        """Its blocks are reserved at the decode replica: send the KV."""
        handoff = self.handoffs[request.request_id]
        handoff.transfer_start_s = self.env.now
        if self.spec.layerwise and not handoff.prefill_done and self.spec.num_layers > 1:
            share = (self.spec.num_layers - 1) / self.spec.num_layers
            self.links.of(handoff.prefill_replica).send(
                handoff.num_bytes * share, lambda: self._first_part_sent(handoff),
                pay_latency=False)
        else:
            self.links.of(handoff.prefill_replica).send(handoff.num_bytes,
                                                        lambda: self._delivered(handoff))

    def _first_part_sent(self, handoff: Handoff) -> None:
        handoff.first_part_sent = True
        if handoff.prefill_done:
            self._send_last_layer(handoff)

    def _send_last_layer(self, handoff: Handoff) -> None:
        self.links.of(handoff.prefill_replica).send(handoff.num_bytes / self.spec.num_layers,
                                                    lambda: self._delivered(handoff))

    def _delivered(self, handoff: Handoff) -> None:
        """The KV is at the decode replica: the prefill replica's blocks are free again."""
        handoff.transfer_end_s = self.env.now
        prefill = self.replicas[handoff.prefill_replica]
        self._prefill[handoff.prefill_replica].release_kv(handoff.request.request_id)
        prefill.wake()
        if self.pool is not None:
            self._kv_kept[handoff.prefill_replica] -= 1
            self.pool.request_ended(handoff.prefill_replica)  # its hand-off is done
        index = handoff.decode_replica - len(self.replicas)
        self._decode[index].receive(handoff.request)
        self.decode_replicas[index].wake()

    def _joined(self, request: Request) -> None:
        """`transfer`: the request joins its decode replica's batch, whose server streams the
        prefill's token now (in step order: a step is planned after the last one's tokens)."""
        replica = self.decode_replicas[self.handoffs[request.request_id].decode_replica
                                       - len(self.replicas)]
        now = self.env.now
        shown = now if replica.stream is None else replica.stream.shown(now, 1)
        request.first_token_s = request.last_token_s = shown

    def _in_system(self) -> int:
        return self._in_system_now
