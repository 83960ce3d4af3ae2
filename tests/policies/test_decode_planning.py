"""Planning a decode-only batch counts, in the same pass, what the engine's stretch asks."""

from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.policies.budget import StepBudget
from batchsim.policies.iteration_level import schedule_all_decodes
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.kv_growth import ExactGrowth
from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepPlan
from batchsim.sim.stretch import decode_horizon


def _running_batch(block_size: int, lengths: list[tuple[int, int, int]]) -> tuple[
        list[Request], KVBlockPool]:
    """Running requests with their first token, each holding exactly its computed tokens."""
    pool = KVBlockPool(100_000, block_size)
    running = []
    for i, (prompt, generated, output) in enumerate(lengths):
        request = Request(i, 0.0, prompt, max(output, generated))
        request.num_generated = generated
        request.num_computed_tokens = prompt + generated - 1
        assert pool.allocate(i, request.num_computed_tokens)
        running.append(request)
    return running, pool


@settings(max_examples=150, deadline=None)
@given(block_size=st.integers(1, 32),
       lengths=st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 300),
                                  st.integers(1, 400)), min_size=1, max_size=40))
def test_stretch_ahead_counts_what_the_separate_passes_count(block_size, lengths):
    plans, pools = [], []
    for stretch_ahead in (False, True):
        running, pool = _running_batch(block_size, lengths)
        plan = StepPlan()
        assert schedule_all_decodes(running, pool, plan, StepBudget(10**6, 10**4),
                                    stretch_ahead=stretch_ahead)
        plans.append(plan)
        pools.append(pool)
    apart, fused = plans
    assert fused.contexts == apart.contexts
    assert pools[0]._owned == pools[1]._owned and pools[0]._free == pools[1]._free
    assert apart.kv_growth is None and apart.horizon is None
    expected = ExactGrowth.of(apart.contexts, block_size)
    assert fused.kv_growth is not None
    assert fused.kv_growth.per_residue == expected.per_residue
    assert fused.kv_growth.batch == expected.batch
    assert fused.kv_growth.first_within == expected.first_within
    assert fused.horizon == decode_horizon(apart)
