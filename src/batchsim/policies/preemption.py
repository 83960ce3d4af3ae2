"""Preempting a running request: by recompute (drop its KV) or by swap (park it in host memory)."""

from __future__ import annotations

from typing import Literal

from batchsim.policies.ordering import WaitingQueue
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepPlan

PreemptionMode = Literal["recompute", "swap"]
# Which running request a full cache preempts: the most recently admitted (vLLM's default,
# `fcfs` policy), or the lowest priority (vLLM's `--scheduling-policy priority`).
VictimRule = Literal["newest", "priority"]

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


def priority_victim(running: list[Request]) -> int:
    """Index of the running request vLLM's priority policy preempts: the largest
    (priority, arrival time) — the lowest priority (highest number), latest arrival among
    equals (vllm/v1/core/sched/scheduler.py `Scheduler.schedule`, `max(self.running,
    key=lambda r: (r.priority, r.arrival_time))`). Exact ties go to the most recently admitted,
    so a tie picks what the `newest` rule would."""
    best = len(running) - 1
    key = (running[best].priority, running[best].arrival_s)
    for index in range(best - 1, -1, -1):  # from the newest: a strict > keeps it on ties
        candidate = (running[index].priority, running[index].arrival_s)
        if candidate > key:
            best, key = index, candidate
    return best


def take_victim(running: list[Request], rule: VictimRule) -> Request:
    """Remove and return the running request `rule` preempts."""
    if rule == "newest":
        return running.pop()
    return running.pop(priority_victim(running))


def allocate_or_preempt(
    request: Request,
    total_tokens: int,
    *,
    running: list[Request],
    waiting: WaitingQueue,
    pool: KVBlockPool,
    mode: PreemptionMode,
    swap_space: HostSwapSpace | None,
    plan: StepPlan,
    victim_rule: VictimRule = "newest",
) -> bool:
    """Make `request` hold KV for `total_tokens`, preempting running requests until it fits;
    victims are listed in `plan.preempted`. Returns False if `request` itself was preempted.

    `newest` (vLLM's rule): the newest running request goes, back to the head of `waiting` in
    admission order. `priority`: the lowest-priority one (`priority_victim`), which may sit
    anywhere in `running` (the caller unschedules it if it was scheduled this step), and goes
    back into `waiting` by its ordering key, not to the front: vLLM's priority queue re-heaps
    a preempted request (`PriorityRequestQueue.prepend_request` is `add_request`), so a
    waiting higher class is admitted before it returns.
    """
    while not pool.allocate(request.request_id, total_tokens):
        victim = take_victim(running, victim_rule)
        preempt(victim, pool, mode, swap_space, plan)
        if victim_rule == "newest":
            waiting.push_front(victim)
        else:
            waiting.push(victim)
        if victim is request:
            return False
    return True
