"""MoE layouts from the experiment file: keys reach the cost model, bad ones name their key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from batchsim.experiment.deployment import Deployment, resolve_deployment
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.gpu.model_spec import ModelError
from tests.validation.experiment_builder import base_experiment, run_dict

_WORKLOAD = {
    "arrivals": {"kind": "poisson", "rate": 20.0},
    "prompt_tokens": {"kind": "uniform", "low": 64, "high": 1024},
    "output_tokens": {"kind": "uniform", "low": 8, "high": 256},
    "num_requests": 200,
}


def _resolve(tmp_path: Path, **keys: object) -> Deployment:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(base_experiment(**keys)), encoding="utf-8")
    exp, base_dir = load_experiment(path)
    return resolve_deployment(exp, base_dir)


_QWEN = {"model": "qwen3-30b-a3b", "hardware": "h200-sxm", "tensor_parallel": 4}


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"tensor_parallel": 2, "expert_parallel": 2},
         r"^expert_parallel: .*needs a mixture-of-experts model"),
        ({**_QWEN, "expert_parallel": 3},
         r"^expert_parallel: expert_parallel=3 must divide tensor_parallel=4"),
        ({**_QWEN, "data_parallel_attention": True},
         r"^data_parallel_attention: .*needs expert_parallel equal to tensor_parallel"),
        ({**_QWEN, "tensor_parallel": 3},
         r"^tensor_parallel: .*32 attention heads, which tensor_parallel=3"),
    ],
)
def test_layout_errors_name_their_key(tmp_path: Path, keys: dict[str, object],
                                      match: str) -> None:
    with pytest.raises(ModelError, match=match):
        _resolve(tmp_path, **keys)


def test_moe_imbalance_below_one_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="moe_imbalance"):
        _resolve(tmp_path, moe_imbalance=0.9)


def test_moe_keys_reach_the_cost_model(tmp_path: Path) -> None:
    seqs = np.ones(64, dtype=np.int64)
    context = np.full(64, 500)

    def step(**keys: object) -> float:
        cost = _resolve(tmp_path, **_QWEN, **keys).cost_model
        return float(cost.step_time(seqs, context, 64).seconds)

    assert step(expert_parallel=4, moe_imbalance=1.5) > step(expert_parallel=4)
    dp = _resolve(tmp_path, **_QWEN, expert_parallel=4, data_parallel_attention=True)
    tp = _resolve(tmp_path, **_QWEN, expert_parallel=4)
    assert dp.memory.data_parallel_attention and dp.memory.expert_parallel == 4
    assert dp.memory.kv_bytes_per_token_per_gpu == tp.memory.kv_bytes_per_token_per_gpu


def test_an_arm_can_switch_on_expert_parallelism(tmp_path: Path) -> None:
    arms = [
        {"name": "tp4", "kind": "continuous"},
        {"name": "dp-ep4", "kind": "continuous",
         "deployment": {"expert_parallel": 4, "data_parallel_attention": True}},
    ]
    result = run_dict(tmp_path, base_experiment(**_QWEN, workload=_WORKLOAD, policies=arms))
    layout = result.arms[1].metrics["deployment"]
    assert isinstance(layout, dict)
    assert (layout["expert_parallel"], layout["data_parallel_attention"]) == (4, True)
    assert all(arm.metrics["completed"] > 0 for arm in result.arms)
