"""The waiting-queue disciplines, one by one: who is the head, and what preemption does."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.fair_share import FairShareQueue
from batchsim.policies.ordering import FcfsQueue, KeyedQueue, priority_key, shortest_prompt_key
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan


def _request(i: int, *, prompt: int = 100, arrival: float = 0.0, tenant: int = 0,
             priority: int = 0, output: int = 10) -> Request:
    return Request(request_id=i, arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
                   tenant=tenant, priority=priority)


def _drain(queue) -> list[int]:
    ids = []
    while len(queue):
        assert queue.head() is not None
        head = queue.head()
        assert queue.pop_head() is head
        ids.append(head.request_id)
    return ids


def test_fcfs_is_arrival_order_with_preempted_requests_back_in_front():
    queue = FcfsQueue()
    for i in range(3):
        queue.push(_request(i, arrival=float(i)))
    first = queue.pop_head()
    queue.push_front(first)  # preempted: ahead of everyone again
    assert queue.oldest_arrival_s() == 0.0
    assert not queue.head_may_change()
    assert _drain(queue) == [0, 1, 2]


def test_shortest_prompt_first_ties_in_arrival_order():
    queue = KeyedQueue(shortest_prompt_key(None))
    for i, prompt in enumerate([500, 20, 300, 20, 1000]):
        queue.push(_request(i, prompt=prompt, arrival=0.1 * i))
    assert [r.request_id for r in queue] == [1, 3, 2, 0, 4]
    assert queue.oldest_arrival_s() == 0.0
    assert _drain(queue) == [1, 3, 2, 0, 4]


def test_the_oldest_arrival_is_found_whatever_the_order():
    for queue in (KeyedQueue(shortest_prompt_key(None)), FairShareQueue()):
        queue.push(_request(0, prompt=50, arrival=2.0, tenant=1))
        assert queue.oldest_arrival_s() == 2.0
        queue.push(_request(1, prompt=900, arrival=1.0))
        queue.push_front(_request(2, arrival=1.5))
        assert queue.oldest_arrival_s() == 1.0


def test_priority_serves_lower_values_first():
    queue = KeyedQueue(priority_key(None))
    for i, priority in enumerate([2, 0, 1, 0]):
        queue.push(_request(i, priority=priority))
    assert _drain(queue) == [1, 3, 2, 0]


def test_preempted_requests_overtake_better_keys_in_admission_order():
    queue = KeyedQueue(shortest_prompt_key(None))
    queue.push(_request(0, prompt=10))
    # Victims come back newest first (allocate_or_preempt pops the newest running request).
    queue.push_front(_request(8, prompt=900))
    queue.push_front(_request(7, prompt=800))
    assert _drain(queue) == [7, 8, 0]


def test_aging_lets_a_long_prompt_overtake_short_ones_that_came_much_later():
    queue = KeyedQueue(shortest_prompt_key(1000.0))  # each second waited = 1000 tokens fewer
    queue.push(_request(0, prompt=5100, arrival=0.0))
    queue.push(_request(1, prompt=100, arrival=4.9))  # came < 5 s later: still ahead
    queue.push(_request(2, prompt=100, arrival=5.1))  # came > 5 s later: behind the long one
    assert _drain(queue) == [1, 0, 2]


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(st.tuples(st.integers(1, 8000), st.floats(0, 100)), min_size=1,
                         max_size=30),
       rate=st.floats(1.0, 5000.0), later=st.floats(0, 1000))
def test_aged_order_is_the_order_of_the_rank_at_any_later_time(requests, rate, later):
    """rank(now) = prompt − (now − arrival) × rate: all waiting requests age alike, so the
    queue's fixed-key order is the rank order at every instant — the head never changes
    with time alone (what keeps the engine's fast path exact)."""
    queue = KeyedQueue(shortest_prompt_key(rate))
    for i, (prompt, arrival) in enumerate(requests):
        queue.push(_request(i, prompt=prompt, arrival=arrival))
    now = max(a for _, a in requests) + later
    ranks = [r.prompt_tokens - (now - r.arrival_s) * rate for r in queue]
    scale = max(1.0, max(abs(x) for x in ranks))
    assert all(a <= b + 1e-9 * scale for a, b in pairwise(ranks))
    assert not queue.head_may_change()


# --- fair share ------------------------------------------------------------------------------


def _serve(queue: FairShareQueue, request: Request, tokens: int) -> None:
    """One step computing `tokens` of `request`, then its token account as the engine would."""
    plan = StepPlan()
    plan.add(request, tokens)
    queue.on_served(plan)
    request.num_computed_tokens += tokens
    if request.num_computed_tokens == request.num_tokens:
        request.num_generated += 1


def test_one_steps_admissions_alternate_between_equally_served_tenants():
    queue = FairShareQueue()
    for i in range(6):
        queue.push(_request(i, tenant=i % 2 if i < 4 else 0))  # tenant 0: 0, 2, 4, 5
    # Nothing served yet: each pop charges the tenant provisionally with its prompt.
    assert [queue.pop_head().tenant for _ in range(4)] == [0, 1, 0, 1]
    assert queue.head_may_change() is False  # only tenant 0 still waits
    assert [r.request_id for r in queue] == [4, 5]


def test_counters_weigh_input_and_output_tokens_and_count_bulk_decode_steps():
    queue = FairShareQueue(input_weight=1.0, output_weight=2.0)
    request = _request(0, prompt=100, output=50)
    queue.push(request)
    queue.pop_head()
    _serve(queue, request, 100)  # the prefill: 99 input tokens and one token emitted
    assert queue.counter(0) == 99 + 2
    # The fast path applied 9 decode steps in bulk before the stretch's last step.
    plan = StepPlan()
    plan.add_decodes([request], [request.num_computed_tokens])
    request.num_computed_tokens += 9
    request.num_generated += 9
    queue.on_served(plan)
    assert queue.counter(0) == 99 + 2 * (1 + 9 + 1)


def test_a_tenant_that_becomes_active_starts_level_and_banks_no_credit():
    queue = FairShareQueue()
    busy = _request(0, prompt=1000, tenant=0)
    queue.push(busy)
    queue.pop_head()
    _serve(queue, busy, 1000)
    assert queue.counter(0) == 999 + 2
    queue.push(_request(1, tenant=1))  # tenant 1 arrives while tenant 0 is running
    queue.push(_request(2, tenant=0))
    assert queue.counter(1) == 0.0  # the lift happens at the next choice
    assert queue.head().tenant == 1
    assert queue.counter(1) == queue.counter(0)  # lifted to the least active counter
    # Tenant 0 leaves; tenant 1 was served meanwhile; tenant 0 returns: lifted, not behind.
    queue.on_finished([busy])
    queue.pop_head()  # tenant 1's request
    queue.pop_head()  # tenant 0's request 2
    queue.on_finished([_request(2, tenant=0)])
    late = _request(3, tenant=0)
    queue.push(late)
    assert queue.head() is late
    assert queue.counter(0) >= queue.counter(1)


def test_fair_share_head_may_change_only_when_two_tenants_wait():
    queue = FairShareQueue()
    queue.push(_request(0, tenant=0))
    assert not queue.head_may_change()
    queue.push(_request(1, tenant=1))
    assert queue.head_may_change()
    queue.push_front(_request(9, tenant=1))  # a preempted request is the head, whatever
    assert not queue.head_may_change()
    assert queue.oldest_arrival_s() == 0.0
