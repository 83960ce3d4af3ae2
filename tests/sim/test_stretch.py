"""The fast path's KV-growth arithmetic against a direct count."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.kv_growth import ExactGrowth, extra_blocks_by_step
from batchsim.sim.recorder import RunRecord
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan
from batchsim.sim.stretch import advance_decode_steps


def _exact_blocks_by_step(contexts: list[int], block_size: int, num_steps: int) -> np.ndarray:
    """`extra_blocks_by_step` of a batch whose allocation is exact, by `ExactGrowth`."""
    return np.array(ExactGrowth.of(contexts, block_size).cumulative(num_steps), dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), steps=st.integers(1, 600))
def test_extra_blocks_by_step_counts_every_block_boundary(data, block_size, steps):
    n = data.draw(st.integers(1, 40))
    tokens = np.array(data.draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n)))
    slack = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    held = -(-tokens // block_size) + slack  # a request always holds its current tokens
    expected = [int(np.maximum(0, -(-(tokens + j) // block_size) - held).sum())
                for j in range(steps)]
    assert extra_blocks_by_step(tokens, held, block_size, steps).tolist() == expected


@settings(max_examples=150, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), steps=st.integers(1, 600))
def test_exact_allocation_growth_equals_the_general_count(data, block_size, steps):
    """A decoding batch holding exactly its next token's blocks: the periodic shortcut."""
    n = data.draw(st.integers(1, 40))
    contexts = data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    tokens = np.array(contexts) + 1
    held = -(-tokens // block_size)
    assert (_exact_blocks_by_step(contexts, block_size, steps).tolist()
            == extra_blocks_by_step(tokens, held, block_size, steps).tolist())


@settings(max_examples=150, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), horizon=st.integers(1, 600),
       free=st.integers(0, 3000))
def test_exact_growth_answers_without_the_array(data, block_size, horizon, free):
    """The KV bound and the count at a step, by arithmetic, against the array's."""
    n = data.draw(st.integers(1, 40))
    contexts = data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    growth = ExactGrowth.of(contexts, block_size)
    counts = _exact_blocks_by_step(contexts, block_size, horizon)
    assert growth.steps_within(free, horizon) == int(np.searchsorted(counts, free, side="right"))
    assert [growth.at(step) for step in range(horizon)] == counts.tolist()
    assert growth.cumulative(horizon) == counts.tolist()
    assert growth.cumulative(horizon, initial=7) == (counts + 7).tolist()


@settings(max_examples=100, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), steps=st.integers(1, 80))
def test_a_stretch_takes_the_blocks_one_allocation_per_request_would(data, block_size, steps):
    """`advance_decode_steps` hands out the blocks one allocation per request would: asking
    the pool about each request (requests may hold spare blocks, slack), or, when the policy
    counted the batch's growth (exact allocation, no slack), by arithmetic alone."""
    n = data.draw(st.integers(1, 30))
    contexts = data.draw(st.lists(st.integers(1, 2000), min_size=n, max_size=n))
    exact = data.draw(st.booleans())
    slack = [0] * n if exact else data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    pools = [KVBlockPool(200_000, block_size), KVBlockPool(200_000, block_size)]
    requests = []
    for i, (context, spare) in enumerate(zip(contexts, slack, strict=True)):
        request = Request(i, 0.0, context, context + steps + 5)
        request.num_computed_tokens, request.num_generated = context, 1
        request.last_token_s = 0.0
        requests.append(request)
        for pool in pools:  # the first step's blocks, and any spare ones
            assert pool.allocate(i, context + 1 + spare * block_size)
    plan = StepPlan()
    plan.add_decodes(requests, list(contexts))
    if exact:
        plan.kv_growth = ExactGrowth.of(contexts, block_size)
    ends = [0.1 * (j + 1) for j in range(steps)]
    advance_decode_steps(plan, ends, [0.1] * steps, list(range(steps)), pool=pools[0],
                         record=RunRecord(), replica=0, num_waiting=0,
                         last_end=0.1 * (steps + 1))
    for i, context in enumerate(contexts):
        assert pools[1].allocate(i, context + steps + 1)
    assert pools[0]._owned == pools[1]._owned
    assert pools[0]._free == pools[1]._free
