"""Static batching (docs/design.md §4): a batch is formed, prefilled together and decoded to the
end.

The batch waits for up to `max_batch_size` requests (or `max_wait_s` after its first request
queued), prefills them padded to the longest prompt, then decodes every slot until the longest
output is done. Finished sequences keep their slot and their KV reservation and compute padding;
newcomers wait for the next batch. Each slot reserves KV for the padded prompt plus
`max_output_tokens`, as a server that allocates per-slot buffers up front does. A batch takes
requests in the waiting queue's order (FCFS by default, policies/ordering.py).
"""

from __future__ import annotations

import numpy as np

from batchsim.policies.ordering import FcfsQueue, WaitingQueue
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepOutcome, StepPlan, apply_tokens


class StaticBatching:
    def __init__(
        self,
        *,
        pool: KVBlockPool,
        max_batch_size: int,
        max_wait_s: float,
        max_output_tokens: int,
        ordering: WaitingQueue | None = None,
    ) -> None:
        self.pool = pool
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_output_tokens = max_output_tokens
        self.waiting: WaitingQueue = FcfsQueue() if ordering is None else ordering
        self.batch: list[Request] = []
        self.padded_prompt = 0
        self.prefilled = False

    @property
    def num_running(self) -> int:
        return sum(1 for r in self.batch if not r.is_finished)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.batch or self.waiting)

    def kv_holders(self) -> list[Request]:
        """The requests holding KV now (sim/kv_fragmentation.py): the batch, finished slots
        included, which keep their reservation until the batch ends."""
        return self.batch

    def waiting_head(self) -> Request | None:
        """The request admitted next, if any (sim/kv_fragmentation.py)."""
        return self.waiting.head() if len(self.waiting) else None

    def has_room(self) -> bool:
        """Only between batches: newcomers cannot join a running static batch."""
        return not self.batch and len(self.waiting) < self.max_batch_size

    def add_request(self, request: Request, now: float) -> bool:
        if request.output_tokens > self.max_output_tokens:
            request.reject(
                f"output of {request.output_tokens} tokens exceeds the static slot reservation "
                f"max_output_tokens={self.max_output_tokens}", kind="output_exceeds_reservation"
            )
            return False
        need = self.pool.blocks_for(request.prompt_tokens + self.max_output_tokens)
        if need > self.pool.num_blocks:
            request.reject(
                f"a slot for this request needs {need} KV blocks, the cache has "
                f"{self.pool.num_blocks}", kind="kv_cache_too_small"
            )
            return False
        self.waiting.push(request)
        return True

    def schedule(self, now: float) -> StepPlan:
        if self.batch:
            return self._decode_plan() if self.prefilled else self._prefill_plan()
        if not self.waiting:
            return StepPlan()
        if len(self.waiting) < self.max_batch_size:
            deadline = self.waiting.oldest_arrival_s() + self.max_wait_s
            if now < deadline:
                return StepPlan(wake_at=deadline)
        self._form_batch(now)
        return self._prefill_plan()

    def _slot_blocks(self, padded_prompt: int) -> int:
        return self.pool.blocks_for(padded_prompt + self.max_output_tokens)

    def _form_batch(self, now: float) -> None:
        """Take requests in queue order while every slot's reservation (at the new padding)
        still fits."""
        padded = 0
        taken: list[Request] = []
        while self.waiting and len(taken) < self.max_batch_size:
            candidate = max(padded, self.waiting.head().prompt_tokens)
            if (len(taken) + 1) * self._slot_blocks(candidate) > self.pool.num_free:
                break
            padded = candidate
            taken.append(self.waiting.pop_head())
        # add_request guarantees one slot fits an empty cache, and the cache is empty here.
        assert taken, "static batch could not take its first request"
        for request in taken:
            allocated = self.pool.allocate(request.request_id, padded + self.max_output_tokens)
            assert allocated
            request.status = RequestStatus.RUNNING
            request.first_scheduled_s = now
        self.batch = taken
        self.padded_prompt = padded
        self.prefilled = False

    def _prefill_plan(self) -> StepPlan:
        plan = StepPlan()
        for request in self.batch:
            plan.add(request, request.prompt_tokens)
        size = len(self.batch)
        plan.cost_new_tokens = np.full(size, self.padded_prompt, dtype=np.int64)
        plan.cost_context_tokens = np.zeros(size, dtype=np.int64)
        plan.num_emitting = size
        return plan

    def _decode_plan(self) -> StepPlan:
        plan = StepPlan()
        for request in self.batch:
            if not request.is_finished:
                plan.add(request, 1)
        size = len(self.batch)  # finished slots still compute (padding)
        # Every slot holds the padded prompt plus one token per decode step so far, and the
        # unfinished requests have generated one token more than that.
        context = self.padded_prompt + plan.requests[0].num_generated - 1
        plan.cost_new_tokens = np.ones(size, dtype=np.int64)
        plan.cost_context_tokens = np.full(size, context, dtype=np.int64)
        plan.num_emitting = size
        return plan

    def repeatable_steps(self, plan: StepPlan, horizon: int) -> int:
        """A prefilled batch decodes unchanged until a request finishes; arrivals just queue."""
        return horizon if self.prefilled else 1

    def on_step_done(self, plan: StepPlan, now: float) -> StepOutcome:
        self.waiting.on_served(plan)
        outcome = apply_tokens(plan)
        for request in outcome.finished:
            request.status = RequestStatus.FINISHED
        if outcome.finished:
            self.waiting.on_finished(outcome.finished)
        self.prefilled = True
        if all(r.is_finished for r in self.batch):
            # The batch decoded until its longest output was done: each slot computed as many
            # decode steps as that one, the steps after its own last token being padding.
            longest = max(r.num_generated for r in self.batch)
            for request in self.batch:
                request.padding_slots = longest - request.num_generated
                self.pool.free(request.request_id)
            self.batch = []
        return outcome
