"""Chunked prefill, step by step: how prompts are cut, who goes first, what a preemption undoes."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepPlan
from tests.policies.checked_policy import CheckedPolicy


def _policy(*, blocks: int = 1000, budget: int = 512, seqs: int = 16,
            threshold: int | None = None) -> tuple[ChunkedPrefill, CheckedPolicy]:
    inner = ChunkedPrefill(pool=KVBlockPool(blocks, 16), token_budget=budget, max_num_seqs=seqs,
                           long_prefill_token_threshold=threshold,
                           swap_space=HostSwapSpace(0))
    return inner, CheckedPolicy(inner, max_seqs=seqs, max_tokens=budget)


def _run(policy: CheckedPolicy, arrivals: dict[int, list[Request]],
         on_plan: Callable[[int, StepPlan], None] | None = None) -> int:
    """Step the policy to the end (no engine); `arrivals[k]` join before step k. Returns steps."""
    step = 0
    while policy.has_work() or any(k >= step for k in arrivals):
        for request in arrivals.get(step, []):
            assert policy.add_request(request, float(step))
        plan = policy.schedule(float(step))
        if on_plan is not None:
            on_plan(step, plan)
        if not plan.is_empty:
            policy.on_step_done(plan, float(step))
        step += 1
    return step


def _chunks_of(request: Request, plans: list[StepPlan]) -> list[int]:
    return [n for plan in plans for r, n in zip(plan.requests, plan.num_new_tokens, strict=True)
            if r is request]


@pytest.mark.parametrize(("prompt", "budget", "threshold"),
                         [(1000, 256, None), (4096, 512, None), (700, 512, 100), (300, 512, None)])
def test_chunks_sum_to_the_prompt_and_a_long_prompt_spreads_over_steps(prompt, budget, threshold):
    _, policy = _policy(budget=budget, threshold=threshold)
    request = Request(0, 0.0, prompt, 3)
    plans: list[StepPlan] = []
    _run(policy, {0: [request]}, lambda _, plan: plans.append(plan))
    cap = min(budget, threshold or budget)
    chunks = _chunks_of(request, plans)
    prefill, decodes = chunks[: -2], chunks[-2:]  # the last two steps decode outputs 2 and 3
    assert sum(prefill) == prompt and decodes == [1, 1]
    assert len(prefill) == math.ceil(prompt / cap)  # alone, every chunk is as large as allowed
    assert all(n == cap for n in prefill[:-1])
    assert request.num_generated == 3 and request.status is RequestStatus.FINISHED


def test_a_prompt_longer_than_the_budget_is_accepted_and_one_the_cache_cannot_hold_rejected():
    inner, policy = _policy(blocks=100, budget=256)  # 1,600 tokens of KV
    assert policy.add_request(Request(0, 0.0, 1500, 100), 0.0)
    too_big = Request(1, 0.0, 1500, 101)
    assert not policy.add_request(too_big, 0.0)
    assert "needs 101 KV blocks" in too_big.reject_reason
    assert inner.num_waiting == 1


def test_running_decodes_get_their_token_every_step_while_a_long_prompt_prefills():
    """Decodes first: a 20k-token document never delays the decodes already running."""
    _, policy = _policy(blocks=4000, budget=512, seqs=16)
    chats = [Request(i, 0.0, 64, 200) for i in range(8)]
    document = Request(8, 5.0, 20_000, 10)
    starved: list[int] = []
    document_chunks: list[int] = []

    def check(step: int, plan: StepPlan) -> None:
        planned = dict(zip(map(id, plan.requests), plan.num_new_tokens, strict=True))
        for chat in chats:
            if chat.num_generated and not chat.is_finished and planned.get(id(chat)) != 1:
                starved.append(step)
        if id(document) in planned:
            document_chunks.append(planned[id(document)])
            assert plan.total_new_tokens <= 512

    _run(policy, {0: chats, 5: [document]}, check)
    assert not starved
    prefill = document_chunks[: -9]  # then 9 decode steps for outputs 2..10
    assert sum(prefill) == 20_000
    assert max(prefill) == 512 - 8  # the budget left after the eight decodes
    assert len(prefill) >= math.ceil(20_000 / 512)


def test_long_prefill_threshold_lets_several_prompts_share_the_budget():
    _, policy = _policy(budget=512, threshold=128)
    documents = [Request(i, 0.0, 1000, 2) for i in range(3)]
    plans: list[StepPlan] = []
    _run(policy, {0: documents}, lambda _, plan: plans.append(plan))
    assert plans[0].num_new_tokens == [128, 128, 128]
    for document in documents:
        assert sum(_chunks_of(document, plans)[:-1]) == 1000


def test_without_threshold_a_long_prompt_takes_the_whole_budget_and_queues_the_rest():
    _, policy = _policy(budget=512)
    document, chat = Request(0, 0.0, 1000, 2), Request(1, 0.0, 50, 2)
    plans: list[StepPlan] = []
    _run(policy, {0: [document, chat]}, lambda _, plan: plans.append(plan))
    assert plans[0].requests == [document] and plans[0].num_new_tokens == [512]
    assert plans[1].requests == [document, chat] and plans[1].num_new_tokens == [488, 24]


def test_a_chunk_that_preempts_evicts_a_decode_planned_earlier_in_the_step():
    """KV for 8 blocks. An old prompt still prefilling (threshold 32) needs one block more than
    is free: the newest running request — a decode already planned — is preempted and gives
    back its token; nobody new is admitted in that step."""
    inner, policy = _policy(blocks=8, budget=64, threshold=32)
    old = Request(0, 0.0, 100, 10)  # 110 tokens: 7 blocks at most
    new = Request(1, 0.0, 16, 40)
    policy.add_request(old, 0.0)
    policy.add_request(new, 0.0)
    plans: list[StepPlan] = []
    while not plans or not plans[-1].preempted:  # old: 32, 64, 96 prompt tokens, then 4
        assert len(plans) < 10, "no preemption happened"
        if plans:
            policy.on_step_done(plans[-1], 0.0)
        plans.append(policy.schedule(0.0))
    assert plans[0].num_new_tokens == [32, 16]
    assert plans[1].requests == [new, old] and plans[1].num_new_tokens == [1, 32]
    last = plans[-1]
    assert last.preempted == [new]
    assert last.requests == [old] and last.num_new_tokens == [4]
    assert list(inner.waiting) == [new] and new.status is RequestStatus.PREEMPTED
    assert inner.pool.held(new.request_id) == 0
