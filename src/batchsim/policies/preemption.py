"""Preempting a running request: by recompute (drop its KV) or by swap (park it in host memory)."""

from __future__ import annotations

from typing import Literal

from batchsim.policies.ordering import FrontLane
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepPlan

PreemptionMode = Literal["recompute", "swap"]

# Keys of a request's own blocks start above every key `pool_block_keys` makes (an int64 block
# id shifted left by 32 bits, or'ed with a token count), so they never match another request's.
_OWN_KEYS = 1 << 96


def own_block_keys(request: Request, block_size: int) -> tuple[int, ...]:
    """The prefix-cache key of every full block of `request`'s known tokens (prompt and
    generated): its prompt's keys where the workload names its blocks, then keys of its own.

    vLLM v1 hashes every full block of every request, outputs included, so a request preempted
    by recompute finds all it had computed still cached until evicted (vllm/v1/request.py
    `Request.block_hashes`, extended as tokens are appended; vllm/v1/core/kv_cache_manager.py
    `KVCacheManager.free`, 0.12.0). Workload keys cover only prompts that share content; the
    rest is this request's alone, and only it can ever look those blocks up.
    """
    keys = request.prefix_keys
    full = request.num_tokens // block_size
    if len(keys) >= full:
        return keys
    base = _OWN_KEYS + (request.request_id << 32)
    return keys + tuple(base + (block + 1) * block_size for block in range(len(keys), full))


def preempt(
    request: Request,
    pool: KVBlockPool,
    mode: PreemptionMode,
    swap_space: HostSwapSpace | None,
    plan: StepPlan,
) -> None:
    """Take `request` off the GPU; the caller puts it back at the head of the waiting queue.

    Swap falls back to recompute when host swap space is full, as vLLM's v0 scheduler did.
    With prefix caching a recomputed request leaves every full block it computed cached under
    its own keys (`own_block_keys`): on readmission it finds them again, and must fit them and
    its next chunk (vLLM v1's `KVCacheManager.allocate_slots` counts the evictable cached blocks
    a request reuses as blocks to allocate, 0.12.0).
    """
    blocks = pool.held(request.request_id)
    swapped = (
        mode == "swap"
        and swap_space is not None
        and blocks > 0
        and swap_space.try_store(request.request_id, blocks)
    )
    if blocks > 0:
        keys: tuple[int, ...] = ()
        if not swapped and pool.prefix_caching:
            keys = request.prefix_keys = own_block_keys(request, pool.block_size)
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
