"""Slowdown, Jain's index and max-min shares: the definitions in batchsim/metrics/fairness.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from batchsim.metrics.fairness import (
    isolated_service_s,
    jain_index,
    max_min_shares,
    slowdown_by_prompt_bucket,
)
from batchsim.policies.continuous import ContinuousBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.test_invariants import LinearCost


def test_isolated_service_is_what_a_request_takes_alone_on_an_idle_replica():
    prompt, output = np.array([1, 30, 700, 5]), np.array([1, 12, 3, 40])
    alone = isolated_service_s(prompt, output, LinearCost())
    for i in range(prompt.size):
        traffic = OpenLoopTraffic(np.array([0.0]), prompt[i:i + 1], output[i:i + 1])
        policy = ContinuousBatching(pool=KVBlockPool(1000, 16), max_num_seqs=4,
                                    max_num_batched_tokens=4096)
        [request] = Simulation([policy], LinearCost(), traffic).run().requests
        assert math.isclose(request.finish_s, alone[i], rel_tol=1e-12)


def test_jain_index_is_one_when_equal_and_one_over_n_when_one_gets_all():
    assert jain_index(np.array([3.0, 3.0, 3.0])) == pytest.approx(1.0)
    assert jain_index(np.array([5.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert jain_index(np.array([0.0, 0.0])) is None


def test_max_min_shares_cap_each_demand_and_split_the_rest_equally():
    shares = max_min_shares(np.array([10.0, 100.0, 40.0]), 90.0)
    assert shares.tolist() == [10.0, 40.0, 40.0]
    assert max_min_shares(np.array([10.0, 20.0]), 30.0).tolist() == [10.0, 20.0]
    assert max_min_shares(np.array([50.0, 50.0]), 30.0).tolist() == [15.0, 15.0]


def test_slowdown_buckets_by_prompt_length_leave_empty_ones_out():
    done = pd.DataFrame({"prompt_tokens": [10, 200, 300, 20000],
                         "slowdown": [1.0, 3.0, 2.0, 8.0]})
    buckets = slowdown_by_prompt_bucket(done)
    assert list(buckets) == ["1-255", "256-1023", "16384+"]
    assert buckets["1-255"]["requests"] == 2 and buckets["1-255"]["mean"] == 2.0
    assert buckets["16384+"]["p50"] == 8.0


def _service_priced_by_step_time(cost, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """`isolated_service_s` the long way: every prefill priced by `step_time`."""
    decode = cost.decode_step_seconds(np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                      1, int((prompt + output).max()))
    before = np.concatenate(([0.0], np.cumsum(decode)))
    prefill = np.array([cost.step_time(np.array([p]), np.zeros(1, dtype=np.int64), 1).seconds
                        for p in prompt.tolist()])
    return prefill + (before[prompt + output - 1] - before[prompt])


@pytest.mark.parametrize("tensor_parallel", [1, 4])
def test_prefills_priced_from_lists_equal_step_time_bit_for_bit(tensor_parallel):
    from batchsim.gpu.cost_model import RooflineCostModel
    from batchsim.gpu.hardware import load_gpu_profile
    from batchsim.gpu.model_spec import load_model

    cost = RooflineCostModel(load_model("llama-3.1-8b"), load_gpu_profile("h100-sxm"),
                             tensor_parallel=tensor_parallel, weight_dtype="bf16", kv_dtype="bf16")
    rng = np.random.default_rng(7)
    prompt = np.concatenate(([1, 16, 17, 8191], rng.integers(1, 9000, 300)))
    output = rng.integers(1, 500, prompt.size)
    fast = isolated_service_s(prompt, output, cost)
    general = _service_priced_by_step_time(cost, prompt, output)
    assert fast.tobytes() == general.tobytes()
