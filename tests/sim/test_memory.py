"""KV capacity: memory x utilisation - weights - reserve, in blocks, per GPU (docs/design.md §2)."""

from __future__ import annotations

import dataclasses

import pytest

from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import MemoryPlan, ModelDoesNotFitError, plan_memory, weights_bytes_per_gpu
from batchsim.gpu.model_spec import ModelError, load_model


def _plan(
    model: str = "llama-3.1-8b",
    gpu: str = "h100-sxm",
    *,
    tensor_parallel: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
) -> MemoryPlan:
    return plan_memory(
        load_model(model),
        load_gpu_profile(gpu),
        tensor_parallel=tensor_parallel,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
    )


def test_blocks_follow_the_design_formula() -> None:
    plan = _plan()
    gpu = load_gpu_profile("h100-sxm")
    free = gpu.memory_bytes * 0.9 - plan.weights_bytes_per_gpu - gpu.runtime_reserve_bytes
    assert plan.kv_bytes_per_token_per_gpu == 131072
    assert plan.block_bytes == 16 * 131072
    assert plan.num_blocks == int(free // plan.block_bytes)
    assert plan.max_cached_tokens == plan.num_blocks * 16


def test_bf16_weights_at_tp1_are_two_bytes_per_parameter() -> None:
    model = load_model("llama-3.1-8b")
    assert weights_bytes_per_gpu(model, 1, "bf16") == 2 * model.weight_params()


def test_tensor_parallel_splits_the_weights() -> None:
    model = load_model("llama-3.1-70b")
    whole = weights_bytes_per_gpu(model, 1, "bf16")
    assert weights_bytes_per_gpu(model, 4, "bf16") == pytest.approx(whole / 4, rel=0.01)


def test_70b_in_bf16_does_not_fit_one_h100() -> None:
    with pytest.raises(ModelDoesNotFitError) as excinfo:
        _plan("llama-3.1-70b")
    message = str(excinfo.value)
    assert "llama-3.1-70b in bf16 needs 141.1 GB of weights per GPU at tensor_parallel=1" in message
    assert "h100-sxm offers 77.3 GB at gpu_memory_utilization=0.9" in message
    assert "raise tensor_parallel or quantise the weights" in message


def test_70b_in_bf16_fits_four_h100s() -> None:
    assert _plan("llama-3.1-70b", tensor_parallel=4).num_blocks > 0


def test_weights_that_fit_but_leave_no_kv_room_say_so() -> None:
    # 70B int4 is ~37 GB; at 50% of an L40S (24 GB) minus the reserve, nothing is left.
    with pytest.raises(ModelDoesNotFitError, match="needs"):
        _plan("llama-3.1-70b", "l40s", weight_dtype="int4", gpu_memory_utilization=0.5)
    with pytest.raises(ModelDoesNotFitError, match="leaves no room for the KV cache"):
        _plan("llama-3.1-8b", "l40s", gpu_memory_utilization=0.4)


def test_fp8_kv_doubles_the_blocks() -> None:
    bf16, fp8 = _plan(kv_dtype="bf16"), _plan(kv_dtype="fp8")
    assert 2 * bf16.num_blocks <= fp8.num_blocks <= 2 * bf16.num_blocks + 1


def test_quantised_weights_leave_more_blocks() -> None:
    bf16 = _plan(weight_dtype="bf16")
    fp8 = _plan(weight_dtype="fp8")
    int4 = _plan(weight_dtype="int4")
    assert bf16.num_blocks < fp8.num_blocks < int4.num_blocks


def test_kv_heads_are_replicated_beyond_one_per_gpu() -> None:
    model = dataclasses.replace(load_model("llama-3.1-8b"), name="two-kv-heads", num_kv_heads=2)
    gpu = load_gpu_profile("h100")
    plan = plan_memory(
        model,
        gpu,
        tensor_parallel=4,
        weight_dtype="bf16",
        kv_dtype="bf16",
        gpu_memory_utilization=0.9,
        block_size=16,
    )
    # Each GPU keeps one whole KV head per layer, not half of one.
    assert plan.kv_bytes_per_token_per_gpu == 2 * model.num_layers * 1 * model.head_dim * 2


def test_tensor_parallel_must_divide_the_query_heads() -> None:
    with pytest.raises(ModelError, match="attention heads"):
        _plan("llama-3.1-8b", tensor_parallel=3)


def test_tensor_parallel_spans_nodes_only_where_the_profile_gives_the_network() -> None:
    with pytest.raises(ValueError, match="gives no network between domains"):
        _plan("llama-3.1-70b", "a100-sxm-80gb", tensor_parallel=16)
    assert _plan("llama-3.1-70b", tensor_parallel=16).num_blocks > 0  # two HGX H100 nodes


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization"),
        ({"block_size": 0}, "block_size"),
        ({"weight_dtype": "fp4"}, "weight dtype"),
        ({"kv_dtype": "int4"}, "KV-cache dtype"),
    ],
)
def test_bad_settings_are_value_errors(override: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _plan(**override)  # type: ignore[arg-type]


def test_describe_is_one_line_with_the_block_count() -> None:
    plan = _plan()
    text = plan.describe()
    assert "\n" not in text
    assert f"{plan.num_blocks:,} blocks of 16 tokens" in text
