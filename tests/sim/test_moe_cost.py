"""Step cost of mixture-of-experts and MLA models (gpu.moe_cost through gpu.cost_model)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel, StepCost
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import ModelSpec, load_model
from batchsim.gpu.moe_cost import LayerStackCost, alltoall_seconds
from batchsim.gpu.moe_layout import Parallelism
from batchsim.gpu.moe_spec import MoESpec

# The profile's GEMM keys for experts too (no `moe_by_weights`): these tests pin how routed
# experts are shaped into GEMMs against a dense MLP priced by the same keys. The fused-MoE
# kernels' own keys are tested in tests/sim/test_moe_experts.py.
_SHIPPED = load_gpu_profile("h200-sxm")
_H200 = replace(_SHIPPED, efficiency=replace(_SHIPPED.efficiency,
                                             moe_by_weights=MappingProxyType({})))


def _cost(model: ModelSpec, tp: int = 1, weights: str = "bf16", **layout: object) -> (
        RooflineCostModel):
    return RooflineCostModel(model, _H200, tensor_parallel=tp, weight_dtype=weights,
                             kv_dtype="bf16", **layout)  # type: ignore[arg-type]


def _prefill(cost: RooflineCostModel, tokens: int) -> StepCost:
    return cost.step_time(np.array([tokens]), np.array([0]), 1)


def _decode(cost: RooflineCostModel, seqs: int, context: int = 1000) -> StepCost:
    return cost.step_time(np.ones(seqs, dtype=np.int64), np.full(seqs, context), seqs)


def _dense_equivalent(model: ModelSpec) -> ModelSpec:
    """The dense model with the same active MLP: width k × expert (+ shared experts)."""
    moe = model.moe
    assert moe is not None
    width = moe.experts_per_token * moe.expert_intermediate_size + moe.shared_width()
    return replace(model, moe=None, intermediate_size=width, num_active_params=0)


_MIXTRAL = load_model("mixtral-8x7b")
_WITH_SHARED = replace(_MIXTRAL, moe=MoESpec(8, 2, 14336, num_shared_experts=1,
                                             shared_expert_intermediate_size=14336))


@pytest.mark.parametrize("model", [_MIXTRAL, _WITH_SHARED], ids=["mixtral", "shared-expert"])
def test_balanced_moe_at_ep1_costs_its_dense_equivalent_when_compute_bound(
    model: ModelSpec,
) -> None:
    """What holds exactly: at T tokens the experts get T·k (token, expert) pairs, so the expert
    GEMMs do exactly the dense equivalent's FLOPs. What holds to 1%: the step time at 8192
    tokens, where FLOPs dominate. The rest is the router GEMM (h × E a layer), the E/k times
    more expert weights streamed (hidden under the FLOPs) and the down projection's shorter K
    (one expert's width, not k of them) in the GEMM's K-ramp and wave terms."""
    tokens = 8192
    stack = LayerStackCost(model, _H200, Parallelism(1), weight_dtype="bf16", imbalance=1.0)
    touched, per_expert = stack.expert_load(np.array([float(tokens)]))
    assert touched[0] == pytest.approx(8.0, abs=1e-9)  # (3/4)^8192 of an expert missed
    assert touched[0] * per_expert[0] == pytest.approx(tokens * 2, rel=1e-12)
    moe, dense = _prefill(_cost(model), tokens), _prefill(_cost(_dense_equivalent(model)), tokens)
    assert moe.attention_s == dense.attention_s
    assert moe.seconds == pytest.approx(dense.seconds, rel=0.01)
    assert moe.seconds >= dense.seconds


def test_a_single_decode_token_reads_only_its_k_experts() -> None:
    stack = LayerStackCost(_MIXTRAL, _H200, Parallelism(1), weight_dtype="bf16", imbalance=1.0)
    touched, per_expert = stack.expert_load(np.array([1.0]))
    assert (touched[0], per_expert[0]) == pytest.approx((2.0, 1.0))
    moe, dense = _decode(_cost(_MIXTRAL), 1), _decode(_cost(_dense_equivalent(_MIXTRAL)), 1)
    assert moe.seconds == pytest.approx(dense.seconds, rel=0.05)  # same weights streamed


def test_decode_weight_reads_grow_until_every_expert_is_touched() -> None:
    cost = _cost(_MIXTRAL)
    linear = {n: _decode(cost, n).linear_s for n in (1, 8, 64, 128)}
    # From 1 to 8 tokens the touched experts go from 2 to 8·(1 − (3/4)^8) per layer: at least
    # that many more experts' weights stream from HBM.
    extra_experts = 8 * (1 - 0.75**8) - 2
    expert_bytes = 32 * 3 * 4096 * 14336 * 2  # one expert in every layer, bf16
    stream_s = extra_experts * expert_bytes / (
        _H200.memory_bandwidth_bytes_per_s * _H200.efficiency.memory_efficiency)
    assert linear[8] - linear[1] >= 0.99 * stream_s
    # By 64 tokens all 8 are touched: more tokens add FLOPs, hardly any bytes.
    assert linear[128] - linear[64] < 0.1 * (linear[8] - linear[1])


def test_moe_over_dense_peaks_when_every_expert_is_read_but_few_tokens_use_them() -> None:
    ratio = {n: _decode(_cost(_MIXTRAL), n).linear_s
             / _decode(_cost(_dense_equivalent(_MIXTRAL)), n).linear_s for n in (1, 32)}
    assert ratio[1] < 1.05
    assert ratio[32] > 3.0  # all 8 experts' weights vs the dense equivalent's 2


_DEEPSEEK = load_model("deepseek-v3")


def _deepseek(imbalance: float = 1.0, ep: int = 8, dp: bool = False) -> RooflineCostModel:
    return _cost(_DEEPSEEK, 8, "fp8", expert_parallel=ep, data_parallel_attention=dp,
                 moe_imbalance=imbalance)


@pytest.mark.parametrize("step", [lambda c: _decode(c, 64), lambda c: _prefill(c, 8192)],
                         ids=["decode", "prefill"])
def test_routing_imbalance_costs_more_under_expert_parallelism(step: object) -> None:
    run = step  # type: ignore[assignment]
    balanced, skewed = run(_deepseek(1.0)), run(_deepseek(1.5))  # type: ignore[operator]
    assert skewed.linear_s > balanced.linear_s
    assert skewed.seconds > balanced.seconds


def test_imbalance_has_no_effect_without_expert_parallelism() -> None:
    assert _decode(_deepseek(2.0, ep=1), 64) == _decode(_deepseek(1.0, ep=1), 64)


def test_imbalance_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="moe_imbalance must be >= 1"):
        _deepseek(0.5)


def test_expert_parallelism_under_tensor_parallel_attention_keeps_the_all_reduces() -> None:
    # Every GPU already holds every token: its experts' partial outputs join the all-reduce.
    with_ep, without = _decode(_deepseek(ep=8), 64), _decode(_deepseek(ep=1), 64)
    assert with_ep.communication_s == without.communication_s


def test_data_parallel_attention_pays_two_all_to_alls_per_moe_layer_instead() -> None:
    seqs, imbalance = 64, 1.25
    step = _decode(_deepseek(imbalance, dp=True), seqs)
    sent = imbalance * (seqs / 8) * 8 * 7168 * 2  # local tokens x top-8 x hidden, bf16
    one = alltoall_seconds(sent, 8.0, link_bw=_H200.intra_node_bandwidth_bytes_per_s,
                           latency_s=_H200.p2p_latency_s)
    assert step.communication_s == pytest.approx(2 * 58 * one, rel=1e-12)


def test_mla_decode_reads_the_latent_once_per_cached_token() -> None:
    """Absorbed MLA under TP8: 16 heads a GPU read one 576-element latent per token and layer;
    memory-bound, so each step's extra context costs the latent's bytes at the KV bandwidth."""
    cost, seqs = _deepseek(ep=1), 64
    steps = cost.decode_step_seconds(np.ones(seqs, dtype=np.int64), np.full(seqs, 4000), seqs, 3)
    latent_s = 61 * (512 + 64) * 2 / (
        _H200.memory_bandwidth_bytes_per_s * _H200.efficiency.kv_read_efficiency)
    assert np.diff(steps) == pytest.approx(seqs * latent_s, rel=1e-6)


def test_mla_decode_with_all_heads_on_a_gpu_is_compute_bound() -> None:
    """Data-parallel attention: all 128 heads on each GPU, an eighth of the tokens; the
    absorbed kernel's 2·(576 + 512) FLOPs per head and token outweigh the latent's bytes."""
    cost, seqs = _deepseek(dp=True), 64
    steps = cost.decode_step_seconds(np.ones(seqs, dtype=np.int64), np.full(seqs, 4000), seqs, 3)
    flops_s = 61 * 128 * 2 * (576 + 512) / (
        _H200.peak_flops.bf16 * _H200.efficiency.attention_compute_efficiency)
    assert np.diff(steps) == pytest.approx(seqs / 8 * flops_s, rel=1e-6)


def test_fast_decode_path_equals_step_time_for_moe_models() -> None:
    for cost in (_deepseek(), _deepseek(dp=True), _cost(_MIXTRAL, 2)):
        seqs = np.ones(32, dtype=np.int64)
        context = np.arange(32) * 50 + 10
        steps = cost.decode_step_seconds(seqs, context, 32, 4)
        for j in range(4):
            assert steps[j] == cost.step_time(seqs, context + j, 32).seconds
        # The engine's list (numpy underneath for data-parallel or MLA attention).
        assert cost.decode_step_list(seqs.tolist(), context.tolist(), 32, 4) == steps.tolist()


def test_a_prefill_chunk_re_expands_the_cached_latents() -> None:
    """Non-absorbed MLA prefill: the chunk's cached context is up-projected to per-head K and V
    (kv_lora 512 → 16 heads × (128 + 128) a GPU under TP8) in every layer."""
    from batchsim.gpu.roofline import gemm_seconds

    cost, context = _deepseek(ep=1), 8192
    stack = LayerStackCost(_DEEPSEEK, _H200, Parallelism(8), weight_dtype="fp8", imbalance=1.0)
    expansion = gemm_seconds(float(context), 16.0 * 256, 512.0,
                             peak_flops=_H200.peak_flops.fp8 or 0.0,
                             memory_bw=_H200.memory_bandwidth_bytes_per_s, weight_bytes=1.0,
                             sm_count=_H200.parallel_units,
                             eff=_H200.efficiency.for_weights("fp8"))
    assert stack.mla_context_expansion_s(context) == pytest.approx(expansion, rel=1e-12)
    fresh = cost.step_time(np.array([2048]), np.array([0]), 1).attention_s
    chunk = cost.step_time(np.array([2048]), np.array([context]), 1).attention_s
    assert chunk - fresh > 61 * expansion
