"""Routed experts in a weight format of their own (`dtype.experts`): their bytes in the memory
plan, their GEMMs in the cost model, and the refusals (docs/how-to/moe.md, "Experts in a
format of their own")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import MXFP4_BYTES, DtypeError
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import plan_memory, weights_bytes_per_gpu
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.moe_cost import LayerStackCost
from batchsim.gpu.moe_layout import Parallelism
from tests.cli_checks import fails_cleanly
from tests.validation.experiment_builder import base_experiment, run_dict

GPT_OSS = load_model("gpt-oss-120b")
LLAMA_8B = load_model("llama-3.1-8b")
H100 = load_gpu_profile("h100-sxm")
B200 = load_gpu_profile("b200")


def test_only_the_routed_experts_change_their_bytes() -> None:
    # gpt-oss-120b's config: 36 MoE layers of 128 experts, each a gate, up and down matrix of
    # 2,880 x 2,880. Stored in MXFP4 (4-bit values, an 8-bit scale per 32) instead of bf16.
    routed = 36 * 128 * 3 * 2880 * 2880
    bf16 = weights_bytes_per_gpu(GPT_OSS, 1, "bf16")
    mixed = weights_bytes_per_gpu(GPT_OSS, 1, "bf16", expert_dtype="mxfp4")
    assert abs((bf16 - mixed) - routed * (2.0 - MXFP4_BYTES)) <= 1
    # Split over 4 GPUs by expert parallelism, each holds a quarter of them.
    quarter = (weights_bytes_per_gpu(GPT_OSS, 4, "bf16", expert_parallel=4)
               - weights_bytes_per_gpu(GPT_OSS, 4, "bf16", expert_parallel=4,
                                       expert_dtype="mxfp4"))
    assert abs(quarter - routed / 4 * (2.0 - MXFP4_BYTES)) <= 1


def test_the_same_format_twice_is_the_one_format() -> None:
    for weights in ("bf16", "fp8", "mxfp4"):
        assert weights_bytes_per_gpu(GPT_OSS, 2, weights, expert_dtype=weights) == \
            weights_bytes_per_gpu(GPT_OSS, 2, weights)
    one = RooflineCostModel(GPT_OSS, H100, tensor_parallel=2, weight_dtype="fp8",
                            kv_dtype="bf16")
    same = RooflineCostModel(GPT_OSS, H100, tensor_parallel=2, weight_dtype="fp8",
                             kv_dtype="bf16", expert_dtype="fp8")
    for new, context in (([1], [0]), ([1] * 64, [500] * 64), ([8192, 1, 1], [0, 700, 90])):
        steps = [model.step_time(np.array(new), np.array(context), len(new))
                 for model in (one, same)]
        assert steps[0] == steps[1]


def _linear_seconds(gpu: str, weights: str, experts: str) -> np.ndarray:
    stack = LayerStackCost(GPT_OSS, load_gpu_profile(gpu), Parallelism(4, 4),
                           weight_dtype=weights, imbalance=1.3, expert_dtype=experts)
    seconds, _, _ = stack.cost_many(np.array([1.0, 64.0, 512.0, 8192.0]))
    return seconds


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_the_experts_and_the_other_layers_are_priced_apart(gpu: str) -> None:
    # A step's linear layers are the non-expert GEMMs (in the weights' format) plus the routed
    # experts (in theirs): swapping the experts' format moves only the second part.
    mixed = _linear_seconds(gpu, "bf16", "mxfp4") + _linear_seconds(gpu, "mxfp4", "bf16")
    pure = _linear_seconds(gpu, "bf16", "bf16") + _linear_seconds(gpu, "mxfp4", "mxfp4")
    np.testing.assert_allclose(mixed, pure, rtol=1e-12)
    # And it does move it: the experts run their format's fused-MoE kernel (fitted per format,
    # so not simply faster at every size: weight-only MXFP4 is slower at one token on Hopper).
    assert not np.allclose(_linear_seconds(gpu, "bf16", "mxfp4"),
                           _linear_seconds(gpu, "bf16", "bf16"))


def test_a_dense_model_refuses_an_expert_format() -> None:
    with pytest.raises(DtypeError, match=r"llama-3\.1-8b has no routed experts"):
        RooflineCostModel(LLAMA_8B, H100, tensor_parallel=1, weight_dtype="bf16",
                          kv_dtype="bf16", expert_dtype="fp8")
    with pytest.raises(DtypeError, match="no routed experts"):
        plan_memory(LLAMA_8B, H100, tensor_parallel=1, weight_dtype="bf16", kv_dtype="bf16",
                    gpu_memory_utilization=0.9, block_size=16, expert_dtype="fp8")
    with pytest.raises(DtypeError, match="weight dtype 'fp6' is not supported"):
        plan_memory(GPT_OSS, H100, tensor_parallel=1, weight_dtype="bf16", kv_dtype="bf16",
                    gpu_memory_utilization=0.9, block_size=16, expert_dtype="fp6")


def test_the_plan_says_which_format_the_experts_are_in() -> None:
    plan = plan_memory(GPT_OSS, B200, tensor_parallel=1, weight_dtype="bf16", kv_dtype="fp8",
                       gpu_memory_utilization=0.9, block_size=16, expert_dtype="mxfp4")
    assert plan.describe().startswith("gpt-oss-120b (bf16 (mxfp4 experts) weights, fp8 KV)")
    whole = plan_memory(GPT_OSS, B200, tensor_parallel=1, weight_dtype="mxfp4",
                        kv_dtype="fp8", gpu_memory_utilization=0.9, block_size=16)
    assert whole.describe().startswith("gpt-oss-120b (mxfp4 weights, fp8 KV)")
    # bf16 attention and embeddings leave less room for the KV cache than all-MXFP4 would.
    assert plan.num_blocks < whole.num_blocks


def test_an_experiment_runs_its_experts_in_their_format(tmp_path: Path) -> None:
    arms = [{"name": "c", "kind": "continuous"}]
    for experts in ("None", "bf16", "mxfp4"):
        (tmp_path / experts).mkdir()
    runs = {experts: run_dict(tmp_path / str(experts), base_experiment(
        model="gpt-oss-120b", hardware="h100-sxm", tensor_parallel=4,
        dtype={"weights": "bf16", **({"experts": experts} if experts else {})},
        policies=arms)) for experts in (None, "bf16", "mxfp4")}
    assert runs["bf16"].arms[0].metrics == runs[None].arms[0].metrics
    mxfp4 = runs["mxfp4"].arms[0].metrics
    assert mxfp4["completed"] > 0 and mxfp4 != runs["bf16"].arms[0].metrics


def test_validate_refuses_it_on_a_dense_model_in_one_line(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump(base_experiment(dtype={"experts": "fp8"})), encoding="utf-8")
    fails_cleanly(["validate", str(exp)], "dtype.experts: ", "has no routed experts")
