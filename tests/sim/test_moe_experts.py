"""The fused-MoE expert kernel's price (gpu.moe_experts) and the keys the cost model gives it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import ACTIVATION_BYTES
from batchsim.gpu.hardware import GEMM_KEYS, GpuProfile, load_gpu_profile
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.moe_experts import (
    ExpertLoad,
    ExpertShape,
    expert_load,
    routed_expert_parts,
    routing_seconds,
)
from batchsim.gpu.roofline import gemm_seconds

_H200 = load_gpu_profile("h200-sxm")
_SHAPE = ExpertShape(num_experts=256.0, top_k=8.0, expert_parallel=8.0, hidden=7168.0,
                     width=2048.0)


def test_one_token_touches_its_k_experts_spread_over_the_expert_parallel_gpus() -> None:
    load = expert_load(1.0, _SHAPE)
    assert load.touched == pytest.approx(8 / 8)  # 32 local experts, each picked with p = 1/32
    assert load.pairs == pytest.approx(1.0)
    assert load.routed == 8.0  # every GPU holds the token and routes all 8 picks
    assert expert_load(1.0, _SHAPE, dispatched=True).routed == pytest.approx(1.0)


def test_routing_skew_loads_the_busiest_gpu_more() -> None:
    even, skewed = expert_load(64.0, _SHAPE), expert_load(64.0, _SHAPE, 1.5)
    assert skewed.pairs == pytest.approx(1.5 * even.pairs)
    assert skewed.touched > even.touched


def _with_moe(gpu: GpuProfile, dtype: str, **keys: float) -> GpuProfile:
    return dataclasses.replace(gpu, efficiency=gpu.efficiency.with_moe_for(dtype, keys))


def test_routing_moves_each_routed_pair_hidden_row_at_the_kernels_bandwidth() -> None:
    gpu = _with_moe(_H200, "bf16", moe_pair_passes=3.0, memory_efficiency=0.5)
    eff = gpu.efficiency.for_moe("bf16")
    load = ExpertLoad(touched=4.0, pairs=10.0, routed=80.0)
    expected = 80 * 3 * 7168 * ACTIVATION_BYTES / (gpu.memory_bandwidth_bytes_per_s * 0.5)
    assert routing_seconds(load, _SHAPE, memory_bw=gpu.memory_bandwidth_bytes_per_s,
                           eff=eff) == pytest.approx(expected, rel=1e-12)


def test_the_kernel_is_its_two_grouped_gemms_plus_the_routing() -> None:
    gpu = _with_moe(_H200, "bf16", moe_pair_passes=2.0)
    eff = gpu.efficiency.for_moe("bf16")
    load = ExpertLoad(touched=4.0, pairs=12.0, routed=96.0)
    common = {"peak_flops": gpu.peak_flops.bf16, "memory_bw": gpu.memory_bandwidth_bytes_per_s,
              "weight_bytes": 2.0, "sm_count": gpu.parallel_units, "eff": eff}
    seconds, _, _ = routed_expert_parts(load, _SHAPE, **common)  # type: ignore[arg-type]
    # 3 tokens per touched expert; gate+up of 4 experts side by side (4·2·2048 x 7168), down.
    gemms = gemm_seconds(3.0, 4 * 2 * 2048.0, 7168.0, **common)  # type: ignore[arg-type]
    gemms += gemm_seconds(3.0, 4 * 7168.0, 2048.0, **common)  # type: ignore[arg-type]
    routing = routing_seconds(load, _SHAPE, memory_bw=gpu.memory_bandwidth_bytes_per_s, eff=eff)
    assert seconds == pytest.approx(gemms + routing, rel=1e-12)


def test_without_moe_keys_the_experts_run_at_the_dense_gemm_keys_of_their_weights() -> None:
    plain = _without_moe_keys(_H200)
    assert plain.efficiency.for_moe("fp8") == plain.efficiency.for_weights("fp8")
    assert plain.efficiency.for_moe("fp8").moe_pair_passes == 0.0


def test_moe_keys_replace_every_gemm_key_and_drop_the_dense_quantisation_kernel() -> None:
    eff = _H200.efficiency.for_moe("fp8")
    keys = _H200.efficiency.moe_by_weights["fp8"]
    assert all(getattr(eff, key) == keys[key] for key in GEMM_KEYS)
    assert eff.moe_pair_passes == keys["moe_pair_passes"] > 0
    assert eff.gemm_quant_token_s == 0.0  # the fused kernel's quantisation is in its passes


def _deepseek_decode_linear_s(gpu: GpuProfile, weights: str = "fp8") -> float:
    cost = RooflineCostModel(load_model("deepseek-v3"), gpu, tensor_parallel=8,
                             weight_dtype=weights, kv_dtype="bf16", expert_parallel=8)
    return cost.step_time(np.ones(64, dtype=np.int64), np.full(64, 1000), 64).linear_s


def _without_moe_keys(gpu: GpuProfile) -> GpuProfile:
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(
        gpu.efficiency, moe_by_weights=MappingProxyType({})))


def test_the_cost_model_prices_routed_experts_with_the_fitted_moe_keys() -> None:
    shipped = _deepseek_decode_linear_s(_H200)
    assert _deepseek_decode_linear_s(_without_moe_keys(_H200)) != pytest.approx(shipped, rel=1e-3)
    dense = _H200.efficiency.for_weights("fp8")
    slower = _with_moe(_H200, "fp8", memory_efficiency=0.5 * dense.memory_efficiency)
    assert _deepseek_decode_linear_s(slower) > shipped


def test_moe_keys_equal_to_the_dense_ones_price_as_the_dense_keys_did() -> None:
    plain = _without_moe_keys(_H200)
    dense = {key: getattr(plain.efficiency, key) for key in GEMM_KEYS}
    as_dense = _with_moe(plain, "bf16", **dense, moe_pair_passes=0.0)
    assert _deepseek_decode_linear_s(as_dense, "bf16") == _deepseek_decode_linear_s(plain, "bf16")


def test_the_how_to_quotes_mixtral_against_its_dense_equivalent_with_the_fitted_keys() -> None:
    """docs/how-to/moe.md: with the H200's fused-MoE keys Mixtral's experts cost more than the
    dense MLP of the same active width (its figures, as printed)."""
    mixtral = load_model("mixtral-8x7b")
    assert mixtral.moe is not None
    width = mixtral.moe.experts_per_token * mixtral.moe.expert_intermediate_size
    dense = dataclasses.replace(mixtral, moe=None, intermediate_size=width, num_active_params=0)

    def step(model: object, new: int, seqs: int) -> tuple[float, float]:
        cost = RooflineCostModel(model, _H200, tensor_parallel=1,  # type: ignore[arg-type]
                                 weight_dtype="bf16", kv_dtype="bf16")
        context = 0 if seqs == 1 and new > 1 else 1000
        result = cost.step_time(np.full(seqs, new), np.full(seqs, context), seqs)
        return result.seconds, result.linear_s

    prefill = step(mixtral, 8192, 1)[0] / step(dense, 8192, 1)[0] - 1
    decode = step(mixtral, 1, 1)[0] / step(dense, 1, 1)[0] - 1
    linear = step(mixtral, 1, 32)[1] / step(dense, 1, 32)[1]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "moe.md").read_text(
        encoding="utf-8")
    assert (f"Mixtral's 8,192-token prefill step comes out {prefill:.0%} over its dense "
            f"equivalent, one decode token {decode:.0%}, the linear layers at 32 decode tokens "
            f"{linear:.1f} times") in " ".join(doc.split())
