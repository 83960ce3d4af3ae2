"""Weights and KV per GPU under tensor, expert and data-parallel-attention layouts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import plan_memory
from batchsim.gpu.memory import weights_bytes_per_gpu as dense_weights_bytes_per_gpu
from batchsim.gpu.model_spec import ModelError, load_model
from batchsim.gpu.moe_layout import (
    Parallelism,
    check_parallelism,
    kv_bytes_per_token_per_gpu,
    weights_bytes_per_gpu,
)
from batchsim.gpu.moe_spec import MoESpec

_BF16 = 2


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_dense_layout_equals_the_dense_formula(tp: int) -> None:
    model = load_model("llama-3.1-70b")
    assert weights_bytes_per_gpu(model, Parallelism(tp), "fp8") == (
        dense_weights_bytes_per_gpu(model, tp, "fp8"))


def test_deepseek_v3_tp8_weights_by_hand() -> None:
    model = load_model("deepseek-v3")
    h, layers, tp = 7168, 61, 8
    replicated = 7168 * 1536 + 1536 + 7168 * 576 + 512  # MLA down-projections and norms
    attention = replicated + (model.attention_params_per_layer() - replicated) / tp
    dense = 3 * h * 18432 // tp
    moe = h * 256 + 3 * h * 2048 // tp + 256 * 3 * h * (2048 // tp)
    fp8 = layers * attention + 3 * dense + 58 * moe  # one byte each
    bf16 = (2 * 129280 // tp * h + (2 * layers + 1) * h) * _BF16
    assert weights_bytes_per_gpu(model, Parallelism(tp), "fp8") == round(fp8 + bf16)


def test_expert_parallel_moves_whole_experts_without_changing_the_bytes() -> None:
    # 2048-wide experts split evenly 8 ways: 1/8 of each expert or 32 whole ones, same bytes.
    model = load_model("deepseek-v3")
    assert weights_bytes_per_gpu(model, Parallelism(8, 8), "fp8") == weights_bytes_per_gpu(
        model, Parallelism(8), "fp8")


def test_data_parallel_attention_replicates_everything_but_the_routed_experts() -> None:
    model = load_model("deepseek-v3")
    h = 7168
    tp_bytes = weights_bytes_per_gpu(model, Parallelism(8), "fp8")
    dp_bytes = weights_bytes_per_gpu(model, Parallelism(8, 8, True), "fp8")
    replicated = 7168 * 1536 + 1536 + 7168 * 576 + 512
    split_attention = model.attention_params_per_layer() - replicated
    extra_fp8 = 7 / 8 * (61 * split_attention + 3 * 3 * h * 18432 + 58 * 3 * h * 2048)
    extra_bf16 = 7 / 8 * 2 * 129280 * h * _BF16
    assert dp_bytes - tp_bytes == pytest.approx(extra_fp8 + extra_bf16, abs=2)


def test_mla_latent_is_replicated_under_tensor_parallelism() -> None:
    model = load_model("deepseek-v3")
    whole = 61 * (512 + 64) * _BF16
    for tp in (1, 2, 8):
        assert kv_bytes_per_token_per_gpu(model, Parallelism(tp), "bf16") == whole
    assert kv_bytes_per_token_per_gpu(model, Parallelism(8, 8), "bf16") == whole
    assert kv_bytes_per_token_per_gpu(model, Parallelism(8, 8, True), "bf16") == whole / 8


def test_gqa_kv_is_split_by_heads_or_by_sequences() -> None:
    model = load_model("mixtral-8x7b")  # 8 KV heads
    per_token = 2 * 32 * 8 * 128 * _BF16
    assert kv_bytes_per_token_per_gpu(model, Parallelism(8), "bf16") == per_token / 8
    assert kv_bytes_per_token_per_gpu(model, Parallelism(8, 8, True), "bf16") == per_token / 8


def test_data_parallel_attention_multiplies_deepseek_kv_capacity() -> None:
    model, gpu = load_model("deepseek-v3"), load_gpu_profile("h200-sxm")
    common = dict(tensor_parallel=8, weight_dtype="fp8", kv_dtype="bf16",
                  gpu_memory_utilization=0.9, block_size=16)
    tp = plan_memory(model, gpu, **common)  # type: ignore[arg-type]
    dp = plan_memory(model, gpu, expert_parallel=8, data_parallel_attention=True,
                     **common)  # type: ignore[arg-type]
    # 8x less KV per token, on the room the replicated weights leave.
    room_ratio = dp.kv_cache_bytes_per_gpu / tp.kv_cache_bytes_per_gpu
    assert dp.max_cached_tokens / tp.max_cached_tokens == pytest.approx(8 * room_ratio, rel=1e-3)
    assert dp.max_cached_tokens > 4 * tp.max_cached_tokens
    assert "EP 8, data-parallel attention" in dp.describe()


def test_deepseek_v3_does_not_fit_eight_h200s_in_bf16() -> None:
    model, gpu = load_model("deepseek-v3"), load_gpu_profile("h200-sxm")
    with pytest.raises(ValueError, match="quantise the weights"):
        plan_memory(model, gpu, tensor_parallel=8, weight_dtype="bf16", kv_dtype="bf16",
                    gpu_memory_utilization=0.9, block_size=16)


@pytest.mark.parametrize(
    ("name", "layout", "match"),
    [
        ("llama-3.1-8b", Parallelism(8, 8), "needs a mixture-of-experts model"),
        ("llama-3.1-8b", Parallelism(8, 1, True), "needs a mixture-of-experts model"),
        ("deepseek-v3", Parallelism(8, 3), "expert_parallel=3 must divide tensor_parallel=8"),
        ("deepseek-v3", Parallelism(3), "128 attention heads, which tensor_parallel=3"),
        ("deepseek-v3", Parallelism(8, 4, True), "needs expert_parallel equal to tensor_parallel"),
    ],
)
def test_layouts_the_model_cannot_take_are_model_errors(
    name: str, layout: Parallelism, match: str
) -> None:
    with pytest.raises(ModelError, match=match):
        check_parallelism(load_model(name), layout)


def test_expert_parallel_must_divide_the_experts() -> None:
    model = replace(load_model("mixtral-8x7b"), moe=MoESpec(6, 2, 14336))
    with pytest.raises(ModelError, match="6 routed experts, which expert_parallel=4"):
        check_parallelism(model, Parallelism(4, 4))
