"""`padding_fraction`: the share of a static batch's computed decode slots that belong to
sequences already finished, counted by hand on one batch."""

from __future__ import annotations

import numpy as np
import pytest

from batchsim.metrics.padding import padding_fraction
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.static import StaticBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.test_invariants import LinearCost

OUTPUTS = [1, 2, 5, 10]


def _one_batch() -> OpenLoopTraffic:
    """Four requests arriving together, answers of 1, 2, 5 and 10 tokens."""
    return OpenLoopTraffic(arrival_s=np.zeros(4), prompt_tokens=np.full(4, 8),
                           output_tokens=np.array(OUTPUTS))


@pytest.mark.parametrize("fast", [False, True])
def test_a_static_batch_counts_the_steps_its_finished_slots_compute(fast: bool) -> None:
    policy = StaticBatching(pool=KVBlockPool(100, 16), max_batch_size=4, max_wait_s=0.0,
                            max_output_tokens=16)
    record = Simulation([policy], LinearCost(), _one_batch(), fast_path=fast).run()
    # The prefill emits every first token; the batch then decodes 9 steps (the 10-token
    # answer's rest), all 4 slots each: 36 slots, of which 0 + 1 + 4 + 9 = 14 are answers.
    assert [r.padding_slots for r in record.requests] == [9, 8, 5, 0]
    measured = np.ones(4, dtype=bool)
    assert padding_fraction(record.requests, measured) == pytest.approx(22 / 36)
    # Without the longest answer: 9 + 8 + 5 padding of 9 + 8 + 5 + 0 + 1 + 4 slots.
    assert padding_fraction(record.requests, np.array([True, True, True, False])) == (
        pytest.approx(22 / 27))


def test_continuous_batching_computes_no_padding() -> None:
    policy = ContinuousBatching(pool=KVBlockPool(100, 16), max_num_seqs=4,
                                max_num_batched_tokens=64)
    record = Simulation([policy], LinearCost(), _one_batch()).run()
    assert padding_fraction(record.requests, np.ones(4, dtype=bool)) == 0.0


def test_unfinished_and_unmeasured_requests_do_not_count() -> None:
    done = Request(0, 0.0, 8, 3, status=RequestStatus.FINISHED, num_generated=3,
                   padding_slots=2)
    rejected = Request(1, 0.0, 8, 3, status=RequestStatus.REJECTED, padding_slots=5)
    assert padding_fraction([done, rejected], np.array([True, True])) == pytest.approx(2 / 4)
    assert padding_fraction([done, rejected], np.array([False, True])) == 0.0
