"""The fast path's KV-growth arithmetic against a direct count."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.stretch import ExactGrowth, exact_blocks_by_step, extra_blocks_by_step


@settings(max_examples=300, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), steps=st.integers(1, 600))
def test_extra_blocks_by_step_counts_every_block_boundary(data, block_size, steps):
    n = data.draw(st.integers(1, 40))
    tokens = np.array(data.draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n)))
    slack = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    held = -(-tokens // block_size) + slack  # a request always holds its current tokens
    expected = [int(np.maximum(0, -(-(tokens + j) // block_size) - held).sum())
                for j in range(steps)]
    assert extra_blocks_by_step(tokens, held, block_size, steps).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), steps=st.integers(1, 600))
def test_exact_allocation_growth_equals_the_general_count(data, block_size, steps):
    """A decoding batch holding exactly its next token's blocks: the periodic shortcut."""
    n = data.draw(st.integers(1, 40))
    contexts = data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    tokens = np.array(contexts) + 1
    held = -(-tokens // block_size)
    assert (exact_blocks_by_step(contexts, block_size, steps).tolist()
            == extra_blocks_by_step(tokens, held, block_size, steps).tolist())


@settings(max_examples=300, deadline=None)
@given(data=st.data(), block_size=st.integers(1, 32), horizon=st.integers(1, 600),
       free=st.integers(0, 3000))
def test_exact_growth_answers_without_the_array(data, block_size, horizon, free):
    """The KV bound and the count at a step, by arithmetic, against the array's."""
    n = data.draw(st.integers(1, 40))
    contexts = data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    growth = ExactGrowth.of(contexts, block_size)
    counts = exact_blocks_by_step(contexts, block_size, horizon)
    assert growth.steps_within(free, horizon) == int(np.searchsorted(counts, free, side="right"))
    assert [growth.at(step) for step in range(horizon)] == counts.tolist()
    assert growth.cumulative(horizon) == counts.tolist()
