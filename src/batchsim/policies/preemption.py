"""Preempting a running request: by recompute (drop its KV) or by swap (park it in host memory)."""

from __future__ import annotations

from typing import Literal

from batchsim.policies.ordering import FrontLane
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepPlan

PreemptionMode = Literal["recompute", "swap"]


def preempt(
    request: Request,
    pool: KVBlockPool,
    mode: PreemptionMode,
    swap_space: HostSwapSpace | None,
    plan: StepPlan,
) -> None:
    """Take `request` off the GPU; the caller puts it back at the head of the waiting queue.

    Swap falls back to recompute when host swap space is full, as vLLM's v0 scheduler did.
    """
    blocks = pool.held(request.request_id)
    swapped = (
        mode == "swap"
        and swap_space is not None
        and blocks > 0
        and swap_space.try_store(request.request_id, blocks)
    )
    if blocks > 0:
        # A recomputed request leaves its computed prompt blocks cached (prefix caching): on
        # readmission it may find them again instead of recomputing them.
        keys = () if swapped else request.prefix_keys
        pool.free(request.request_id, keys, request.num_computed_tokens)
    if swapped:
        request.swapped_out = True
        plan.swap_tokens += request.num_computed_tokens
    else:
        # Counted as recomputed now; what readmission finds in the prefix cache is given back.
        request.recomputed_tokens += request.num_computed_tokens
        request.dropped_tokens = request.num_computed_tokens
        request.num_computed_tokens = 0
    request.preemptions += 1
    request.status = RequestStatus.PREEMPTED
    plan.preempted.append(request)


def swap_in(request: Request, swap_space: HostSwapSpace | None, plan: StepPlan) -> None:
    """Bring a swapped-out request's KV back (its device blocks were allocated by the caller)."""
    if swap_space is not None and request.swapped_out:
        swap_space.release(request.request_id)
        request.swapped_out = False
        plan.swap_tokens += request.num_computed_tokens


def allocate_or_preempt(
    request: Request,
    total_tokens: int,
    *,
    running: list[Request],
    waiting: FrontLane,
    pool: KVBlockPool,
    mode: PreemptionMode,
    swap_space: HostSwapSpace | None,
    plan: StepPlan,
) -> bool:
    """Make `request` hold KV for `total_tokens`, preempting the newest running request until it
    fits (vLLM's rule); victims go back to the head of `waiting` in admission order and are listed
    in `plan.preempted`. Returns False if `request` itself was preempted.
    """
    while not pool.allocate(request.request_id, total_tokens):
        victim = running.pop()
        preempt(victim, pool, mode, swap_space, plan)
        waiting.push_front(victim)
        if victim is request:
            return False
    return True
