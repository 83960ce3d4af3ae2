"""Chunked prefill with `mixed_prefill=False`: SGLang's default, a step never mixes prefill and
decode (docs/design.md §4)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.experiment.policy_factory import build_policy
from batchsim.experiment.schema import ChunkedPrefillArm
from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.preemption import PreemptionMode
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_plan import StepPlan
from tests.policies.checked_policy import CheckedPolicy
from tests.policies.test_invariants import LinearCost, _check_conservation, _traffic, workloads


def _is_decode(request: Request, tokens: int) -> bool:
    """`tokens` (planned, not yet applied) are the request's one pending token after its first.
    A prompt's last token sets the first token, and a recomputed request's chunks rebuild its
    context: both are prefill."""
    return (tokens == 1 and request.num_generated > 0
            and request.num_computed_tokens + 1 == request.num_tokens)


class UnmixedChecked(CheckedPolicy):
    """CheckedPolicy that also asserts the unmixed rule on every plan, before it runs.

    A step is all prefill (chunks and admissions) or all decodes of running requests. A
    decode step decodes every running request, and it
    comes only when no prefill could be scheduled: no running request was still prefilling
    (unless it preempted itself), and the waiting head, when admission was tried, could not
    get its chunk's KV or a sequence slot.
    """

    inner: ChunkedPrefill

    def __init__(self, inner: ChunkedPrefill, *, max_seqs: int, max_tokens: int) -> None:
        super().__init__(inner, max_seqs=max_seqs, max_tokens=max_tokens)
        self.prefill_steps = 0
        self.decode_steps = 0

    def schedule(self, now: float) -> StepPlan:
        inner = self.inner
        prefilling = [r for r in inner.running if not _is_decode(r, r.num_uncomputed_tokens)]
        num_running, free = len(inner.running), inner.pool.num_free
        head = inner.waiting.head() if inner.waiting else None
        was_running = {id(r) for r in inner.running}
        plan = super().schedule(now)
        # An admission is prefill work, even a swapped-out request's return with one token.
        kinds = {id(r) in was_running and _is_decode(r, n)
                 for r, n in zip(plan.requests, plan.num_new_tokens, strict=True)}
        assert len(kinds) <= 1, "a step mixed prefill chunks and decodes"
        if kinds == {True}:
            self.decode_steps += 1
            assert all(r in plan.preempted for r in prefilling), "prefill work was left"
            assert set(map(id, plan.requests)) == set(map(id, inner.running)), \
                "a decode step left a running request out"
            if head is not None and not plan.preempted:
                chunk = min(head.num_uncomputed_tokens, inner.token_budget,
                            inner.long_prefill_token_threshold or inner.token_budget)
                need = inner.pool.blocks_for(head.num_computed_tokens + chunk)
                assert num_running >= inner.max_num_seqs or need > free, \
                    "the waiting head could have been admitted"
        elif kinds == {False}:
            self.prefill_steps += 1
        return plan


def _policy(*, blocks: int = 1000, budget: int = 512, seqs: int = 16,
            threshold: int | None = None, mode: PreemptionMode = "recompute",
            swap_blocks: int = 0) -> tuple[ChunkedPrefill, UnmixedChecked]:
    inner = ChunkedPrefill(pool=KVBlockPool(blocks, 16), token_budget=budget, max_num_seqs=seqs,
                           long_prefill_token_threshold=threshold, preemption=mode,
                           swap_space=HostSwapSpace(swap_blocks), mixed_prefill=False)
    return inner, UnmixedChecked(inner, max_seqs=seqs, max_tokens=budget)


def _step_through(policy: CheckedPolicy, arrivals: dict[int, list[Request]]) -> list[StepPlan]:
    """Step the policy to the end without an engine (`arrivals[k]` join before step k); the
    plans, one per step (empty when idle)."""
    plans: list[StepPlan] = []
    step = 0
    while policy.has_work() or any(k >= step for k in arrivals):
        for request in arrivals.get(step, []):
            assert policy.add_request(request, float(step))
        plan = policy.schedule(float(step))
        plans.append(plan)
        if not plan.is_empty:
            policy.on_step_done(plan, float(step))
        step += 1
    return plans


def _tokens(plan: StepPlan) -> dict[int, int]:
    return {r.request_id: n for r, n in zip(plan.requests, plan.num_new_tokens, strict=True)}


def test_a_prompt_prefills_alone_and_the_decodes_resume_after_it():
    """Four chats decode; a 1,537-token document arrives: its four chunks (512, 512, 512 and a
    last token, which sets its first token and so is prefill too) run alone, then all five
    decode together. Mixed, the chats would have decoded beside every chunk."""
    _, policy = _policy(budget=512)
    chats = [Request(i, 0.0, 64, 12) for i in range(4)]
    document = Request(4, 3.0, 1537, 3)
    plans = _step_through(policy, {0: chats, 3: [document]})
    assert _tokens(plans[0]) == {0: 64, 1: 64, 2: 64, 3: 64}  # admitted together: prefill
    assert _tokens(plans[1]) == _tokens(plans[2]) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert [_tokens(p) for p in plans[3:7]] == [{4: 512}, {4: 512}, {4: 512}, {4: 1}]
    assert _tokens(plans[7]) == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}  # decoding resumes
    assert all(r.status is RequestStatus.FINISHED and r.num_generated == r.output_tokens
               for r in [*chats, document])
    assert policy.prefill_steps == 5

    inner = ChunkedPrefill(pool=KVBlockPool(1000, 16), token_budget=512, max_num_seqs=16)
    mixed = CheckedPolicy(inner, max_seqs=16, max_tokens=512)
    chats = [Request(i, 0.0, 64, 12) for i in range(4)]
    mixed_plans = _step_through(mixed, {0: chats, 3: [Request(4, 3.0, 1537, 3)]})
    assert _tokens(mixed_plans[3]) == {0: 1, 1: 1, 2: 1, 3: 1, 4: 508}


def test_a_continuing_prompt_goes_first_then_the_queue_fills_the_budget():
    """A partial prompt continues before any waiting request, and waiting requests join its
    prefill step in queue order up to the budget; the requests that got their first token
    wait while the last partial prompt finishes."""
    _, policy = _policy(budget=256)
    long = Request(0, 0.0, 400, 2)
    short = [Request(1, 1.0, 100, 2), Request(2, 1.0, 100, 2)]
    plans = _step_through(policy, {0: [long], 1: short})
    assert _tokens(plans[0]) == {0: 256}
    assert _tokens(plans[1]) == {0: 144, 1: 100, 2: 12}
    assert _tokens(plans[2]) == {2: 88}  # the two new decodes wait for the prefill
    assert _tokens(plans[3]) == {0: 1, 1: 1, 2: 1}


def test_a_blocked_queue_lets_the_batch_decode():
    """A waiting request that cannot get KV is not prefill work: the batch decodes meanwhile,
    and the request is admitted (alone in its step) once a finish frees the cache."""
    _, policy = _policy(blocks=12, budget=512)  # 192 tokens of KV
    first = Request(0, 0.0, 100, 5)
    second = Request(1, 1.0, 100, 5)  # 7 blocks: does not fit beside the first's 7
    plans = _step_through(policy, {0: [first], 1: [second]})
    assert [_tokens(p) for p in plans[:6]] == [{0: 100}, {0: 1}, {0: 1}, {0: 1}, {0: 1},
                                               {1: 100}]
    assert policy.decode_steps > 0 and second.status is RequestStatus.FINISHED


def _plan_digest(policy: CheckedPolicy, arrivals: dict[int, list[Request]]) -> str:
    """Every step's (request, tokens) and preemptions, hashed: the policy's whole schedule."""
    digest = hashlib.sha256()
    for step, plan in enumerate(_step_through(policy, arrivals)):
        digest.update(repr((step, sorted(_tokens(plan).items()),
                            [r.request_id for r in plan.preempted])).encode())
    return digest.hexdigest()


def _pinned_workload() -> dict[int, list[Request]]:
    rng = np.random.default_rng(7)
    arrivals: dict[int, list[Request]] = {}
    for i in range(120):
        step = int(rng.integers(0, 400))
        prompt, output = int(rng.integers(1, 600)), int(rng.integers(1, 200))
        arrivals.setdefault(step, []).append(Request(i, float(step), prompt, output))
    return arrivals


# The schedules of `_pinned_workload` computed by the policy before `mixed_prefill` existed:
# the default must reproduce them step for step (small caches, so they preempt).
_PINNED = {
    ("recompute", None): "3fa869cccd97adebaadc820f62bba9066008aa3abb0e682b8f57b30b7f0c1cc9",
    ("swap", 100): "0885f98e9f15d60f7f837b9f309e5e6deaf0bd4a90bbd4618e25009360fa6c4d",
}


def test_mixed_prefill_true_is_the_default_and_schedules_exactly_as_before():
    assert ChunkedPrefillArm(name="a").mixed_prefill is True
    for (mode, threshold), expected in _PINNED.items():
        inner = ChunkedPrefill(pool=KVBlockPool(60, 16), token_budget=256, max_num_seqs=12,
                               long_prefill_token_threshold=threshold, preemption=mode,
                               swap_space=HostSwapSpace(30))
        checked = CheckedPolicy(inner, max_seqs=12, max_tokens=256)
        assert _plan_digest(checked, _pinned_workload()) == expected, (mode, threshold)
        assert checked.preempting_steps > 0


def test_the_arm_builds_an_unmixed_policy():
    arm = ChunkedPrefillArm(name="sglang", mixed_prefill=False)
    policy = build_policy(arm, 0, num_blocks=100, block_size=16, swap_blocks=0,
                          max_model_len=2048)
    assert isinstance(policy, ChunkedPrefill) and policy.mixed_prefill is False
    default = build_policy(ChunkedPrefillArm(name="vllm"), 0, num_blocks=100, block_size=16,
                           swap_blocks=0, max_model_len=2048)
    assert isinstance(default, ChunkedPrefill) and default.mixed_prefill is True


@settings(max_examples=60, deadline=None)
@given(w=workloads, blocks=st.integers(4, 200), seqs=st.integers(1, 16),
       extra_budget=st.integers(0, 700), threshold=st.one_of(st.none(), st.integers(1, 300)),
       mode=st.sampled_from(["recompute", "swap"]), swap_blocks=st.integers(0, 50))
def test_unmixed_never_mixes_and_every_request_gets_its_exact_output(
        w, blocks, seqs, extra_budget, threshold, mode, swap_blocks):
    """Random traffic, budgets below the prompts and caches small enough to preempt
    mid-prefill: every plan obeys the unmixed rule, tokens and blocks are conserved, every
    request finishes with exactly its output tokens (or is rejected as too big for the cache),
    and the fast path gives each request the same times as stepping one by one."""
    budget = seqs + extra_budget  # as the arm requires: every running request can decode
    times = []
    for fast in (True, False):
        inner, checked = _policy(blocks=blocks, budget=budget, seqs=seqs, threshold=threshold,
                                 mode=mode, swap_blocks=swap_blocks)
        record = Simulation([checked], LinearCost(), _traffic(w), fast_path=fast).run()
        _check_conservation(record, checked)
        for r in record.requests:
            if r.status is RequestStatus.REJECTED:
                assert inner.pool.blocks_for(r.prompt_tokens + r.output_tokens) > blocks
            else:
                assert r.num_generated == r.output_tokens
        times.append([(r.status, r.preemptions, r.first_token_s, r.finish_s)
                      for r in record.requests])
    for (status, preemptions, *fast_times), (slow_status, slow_preemptions, *slow_times) in zip(
            *times, strict=True):
        assert (status, preemptions) == (slow_status, slow_preemptions)
        assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and
                   math.isnan(b)) for a, b in zip(fast_times, slow_times, strict=True))
