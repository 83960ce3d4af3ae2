"""Each pool of a `disaggregated` arm is priced with its own layout: expert parallelism and
data-parallel attention per pool, across nodes where the GPU's profile gives the network, and
refused with the pool's key where the model or the GPU cannot take it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from batchsim.experiment.deployment import resolve_engine
from batchsim.experiment.disaggregation import Pool, resolve_pool
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.policy_factory import ArmError
from batchsim.experiment.runner import run_experiment
from batchsim.experiment.schema import DisaggregatedArm, Experiment
from batchsim.gpu.model_spec import load_model

MOE: dict[str, Any] = {"name": "e", "seed": 1, "model": "qwen3-30b-a3b",
                       "hardware": "h100-sxm",
                       "tensor_parallel": 2, "max_model_len": 4096,
                       "workload": {"arrivals": {"kind": "poisson", "rate": 4},
                                    "num_requests": 40,
                                    "prompt_tokens": {"kind": "fixed", "value": 512},
                                    "output_tokens": {"kind": "fixed", "value": 32}},
                       "policies": [{"name": "d", "kind": "disaggregated",
                                     "kv_link": {"bandwidth_gb_s": 50, "latency_us": 10}}]}


def _experiment(tmp_path: Path, **arm: Any) -> tuple[Experiment, Path]:
    data = {**MOE, "policies": [{**MOE["policies"][0], **arm}]}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_experiment(path)


def _pool(tmp_path: Path, role: str, **arm: Any) -> Pool:
    exp, base_dir = _experiment(tmp_path, **arm)
    policy = exp.policies[0]
    assert isinstance(policy, DisaggregatedArm)
    return resolve_pool(exp, policy, 0, role, load_model(exp.model), base_dir,
                        resolve_engine(exp, base_dir))


def test_a_decode_pool_with_dp_attention_holds_more_kv_and_its_prefill_pool_is_unchanged(
        tmp_path: Path) -> None:
    plain = _pool(tmp_path, "decode", decode_tensor_parallel=8)
    dp = _pool(tmp_path, "decode", decode_tensor_parallel=8, decode_expert_parallel=8,
               decode_data_parallel_attention=True)
    assert dp.layout.data_parallel_attention and dp.layout.expert_parallel == 8
    # Each GPU keeps the whole KV of its own sequences: none of the 4 KV heads is replicated.
    assert dp.memory.kv_bytes_per_token_per_gpu < plain.memory.kv_bytes_per_token_per_gpu
    prefill = _pool(tmp_path, "prefill", decode_tensor_parallel=8, decode_expert_parallel=8,
                    decode_data_parallel_attention=True)
    assert prefill.describe() == _pool(tmp_path, "prefill").describe()
    assert "expert_parallel" not in plain.describe()
    assert dp.describe()["expert_parallel"] == 8


def test_a_decode_pool_across_two_nodes_pays_the_network(tmp_path: Path) -> None:
    across = _pool(tmp_path, "decode", decode_tensor_parallel=16, decode_expert_parallel=16,
                   decode_data_parallel_attention=True)
    inside = _pool(tmp_path, "decode", decode_tensor_parallel=8, decode_expert_parallel=8,
                   decode_data_parallel_attention=True)
    step = (np.array([512] * 16), np.zeros(16, dtype=np.int64), 16)
    assert across.cost_model.step_time(*step).communication_s > \
        2 * inside.cost_model.step_time(*step).communication_s


@pytest.mark.parametrize(("arm", "key"), [
    ({"decode_expert_parallel": 3}, r"^policies\.0\.decode_expert_parallel \(decode pool\)"),
    ({"prefill_data_parallel_attention": True},
     r"^policies\.0\.prefill_data_parallel_attention \(prefill pool\)"),
    ({"decode_tensor_parallel": 16, "decode_hardware": "a100-sxm-80gb"},
     r"^policies\.0\.decode_tensor_parallel \(decode pool\).*NVLink domain of a100-sxm-80gb"),
])
def test_a_pool_layout_it_cannot_price_is_refused_under_its_key(
        tmp_path: Path, arm: dict[str, Any], key: str) -> None:
    exp, base_dir = _experiment(tmp_path, **arm)
    with pytest.raises(ArmError, match=key):
        run_experiment(exp, base_dir)


def test_a_disaggregated_arm_with_an_ep_decode_pool_runs(tmp_path: Path) -> None:
    exp, base_dir = _experiment(tmp_path, decode_expert_parallel=2,
                                decode_data_parallel_attention=True)
    [arm] = run_experiment(exp, base_dir).arms
    assert arm.metrics["completed"] == 40
    pools = arm.metrics["pools"]
    assert isinstance(pools, dict) and pools["decode"]["data_parallel_attention"] is True
