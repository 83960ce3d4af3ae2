"""The roofline cost model reproduces the physics the simulator relies on (docs/design.md §3)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import batchsim.gpu.cost_model as cost_model_module
from batchsim.gpu.cost_model import RooflineCostModel, StepCost
from batchsim.gpu.dtypes import bytes_per_element
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import weights_bytes_per_gpu
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.roofline import (
    allreduce_seconds,
    decode_attention_seconds,
    gemm_parts,
    gemm_seconds,
    prefill_attention_seconds,
)


def _cost_model(
    model: str = "llama-3.1-8b",
    gpu: str = "h100-sxm",
    *,
    tensor_parallel: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
) -> RooflineCostModel:
    return RooflineCostModel(
        load_model(model),
        load_gpu_profile(gpu),
        tensor_parallel=tensor_parallel,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
    )


def _decode(cost_model: RooflineCostModel, batch: int, context: int) -> StepCost:
    new = np.ones(batch, dtype=np.int64)
    ctx = np.full(batch, context, dtype=np.int64)
    return cost_model.step_time(new, ctx, batch)


def _prefill(cost_model: RooflineCostModel, prompt: int) -> StepCost:
    return cost_model.step_time(
        np.array([prompt], dtype=np.int64), np.array([0], dtype=np.int64), 1
    )


def test_decode_batch_of_32_costs_about_the_same_as_batch_of_1() -> None:
    cost_model = _cost_model()
    one, thirty_two = _decode(cost_model, 1, 128), _decode(cost_model, 32, 128)
    assert one.seconds < thirty_two.seconds < 1.25 * one.seconds


def test_decode_batch_1_streams_the_weights_once() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu_profile("h100-sxm")
    step = _decode(_cost_model(), 1, 128)
    # Lower bound: every weight byte crosses HBM at the effective bandwidth (~16 GB / 2.7 TB/s).
    streaming_s = weights_bytes_per_gpu(model, 1, "bf16") / (
        gpu.memory_bandwidth_bytes_per_s * gpu.efficiency.memory_efficiency
    )
    assert 3e-3 < streaming_s < 10e-3  # "a few ms": the physics, independent of the code
    assert streaming_s < step.seconds < 1.25 * streaming_s
    assert not step.compute_bound_linear


def _kv_read_s(model: str, gpu: str, kv_tokens: float, kv_dtype: str = "bf16") -> float:
    """Time to stream `kv_tokens` tokens of K and V (all layers) at the fitted bandwidth."""
    profile = load_gpu_profile(gpu)
    kv_bytes = load_model(model).kv_bytes_per_token(bytes_per_element(kv_dtype)) * kv_tokens
    return kv_bytes / (profile.memory_bandwidth_bytes_per_s * profile.efficiency.kv_read_efficiency)


def test_decode_time_grows_with_total_context() -> None:
    cost_model = _cost_model()
    short, long = _decode(cost_model, 16, 512), _decode(cost_model, 16, 8192)
    assert long.seconds > short.seconds
    assert long.linear_s == short.linear_s
    # Only the KV bytes grow: 16 sequences x (8192 - 512) more cached tokens.
    extra = _kv_read_s("llama-3.1-8b", "h100-sxm", 16 * (8192 - 512))
    assert long.attention_s - short.attention_s == pytest.approx(extra)


def test_decode_attention_is_the_fitted_operator_function_times_layers() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu_profile("h100-sxm")
    contexts = np.array([10, 200, 3000], dtype=np.int64)
    step = _cost_model().step_time(np.ones(3, dtype=np.int64), contexts, 3)
    per_layer = decode_attention_seconds(
        3.0, float((contexts + 1).sum()), q_heads=model.num_heads, kv_heads=model.num_kv_heads,
        head_dim=model.head_dim, kv_bytes=2.0, memory_bw=gpu.memory_bandwidth_bytes_per_s,
        sm_count=gpu.parallel_units, eff=gpu.efficiency,
    )
    assert step.attention_s == pytest.approx(model.num_layers * per_layer)


def test_decode_attention_reads_every_cached_token_once() -> None:
    one = _cost_model().step_time(np.ones(1, dtype=np.int64), np.array([1000]), 1)
    more = _cost_model().step_time(np.ones(1, dtype=np.int64), np.array([1001]), 1)
    assert more.attention_s - one.attention_s == pytest.approx(
        _kv_read_s("llama-3.1-8b", "h100-sxm", 1)
    )


def test_fp8_kv_halves_the_kv_read_time_of_decode_attention() -> None:
    bf16 = _decode(_cost_model(kv_dtype="bf16"), 8, 4096)
    fp8 = _decode(_cost_model(kv_dtype="fp8"), 8, 4096)
    assert bf16.attention_s - fp8.attention_s == pytest.approx(
        _kv_read_s("llama-3.1-8b", "h100-sxm", 8 * 4097) / 2
    )


def test_one_token_is_memory_bound_and_4096_tokens_compute_bound() -> None:
    cost_model = _cost_model()
    assert not _decode(cost_model, 1, 0).compute_bound_linear
    assert _prefill(cost_model, 4096).compute_bound_linear


def test_prefill_grows_linearly_then_super_linearly() -> None:
    cost_model = _cost_model()
    t_2k, t_4k = _prefill(cost_model, 2048).seconds, _prefill(cost_model, 4096).seconds
    assert 1.8 < t_4k / t_2k < 2.3  # GEMM FLOPs dominate: ~linear in the prompt
    per_token_4k = t_4k / 4096
    per_token_64k = _prefill(cost_model, 65536).seconds / 65536
    assert per_token_64k > 1.5 * per_token_4k  # quadratic attention takes over


def test_mixed_step_runs_prefill_and_decode_attention_in_one_kernel_per_layer() -> None:
    cost_model = _cost_model()
    new = np.array([1, 1, 512], dtype=np.int64)
    ctx = np.array([1000, 2000, 0], dtype=np.int64)
    mixed = cost_model.step_time(new, ctx, 2)
    decode_only = cost_model.step_time(new[:2], ctx[:2], 2)
    prefill_only = cost_model.step_time(new[2:], ctx[2:], 0)
    one_launch = 32 * load_gpu_profile("h100-sxm").efficiency.attention_launch_s
    assert mixed.attention_s == pytest.approx(
        decode_only.attention_s + prefill_only.attention_s - one_launch
    )


def test_short_chunk_on_a_long_context_costs_at_least_reading_its_kv() -> None:
    model, gpu = load_model("llama-3.1-8b"), load_gpu_profile("h100-sxm")
    step = _cost_model().step_time(
        np.array([2], dtype=np.int64), np.array([100_000], dtype=np.int64), 1
    )
    # Physics: every cached byte crosses HBM at no more than the spec bandwidth.
    at_spec_bandwidth = model.kv_bytes_per_token(2.0) * 100_002 / gpu.memory_bandwidth_bytes_per_s
    assert step.attention_s > at_spec_bandwidth
    # And the price is the fitted prefill-attention function of that chunk, times the layers.
    d, q_heads, kv_heads = model.head_dim, model.num_heads, model.num_kv_heads
    per_layer = prefill_attention_seconds(
        4.0 * d * q_heads * 2 * (100_000 + 1), 2.0 * q_heads,
        100_002 * 2 * kv_heads * d * 2.0 + 2 * 2 * q_heads * d * 2.0,
        peak_flops=gpu.peak_flops.bf16, memory_bw=gpu.memory_bandwidth_bytes_per_s,
        eff=gpu.efficiency,
    )
    assert step.attention_s == pytest.approx(model.num_layers * per_layer)


def test_lm_head_runs_only_for_emitting_sequences() -> None:
    cost_model = _cost_model()
    new, ctx = np.array([2048], dtype=np.int64), np.array([0], dtype=np.int64)
    chunk = cost_model.step_time(new, ctx, 0)  # a prefill chunk that does not finish the prompt
    last = cost_model.step_time(new, ctx, 1)
    assert last.linear_s > chunk.linear_s


def test_tensor_parallel_lowers_step_time_but_communicates() -> None:
    tp1 = _decode(_cost_model("llama-3.1-70b", tensor_parallel=1), 32, 1024)
    tp2 = _decode(_cost_model("llama-3.1-70b", tensor_parallel=2), 32, 1024)
    assert tp1.communication_s == 0
    assert tp2.communication_s > 0
    assert tp2.seconds < tp1.seconds


def test_fp8_weights_lower_decode_time() -> None:
    for gpu in ("h100-sxm", "a100-sxm-80gb"):  # A100: no fp8 FLOPs, but half the bytes
        bf16 = _decode(_cost_model(gpu=gpu, weight_dtype="bf16"), 16, 1024)
        fp8 = _decode(_cost_model(gpu=gpu, weight_dtype="fp8"), 16, 1024)
        assert fp8.seconds < bf16.seconds


def _layer_gemms_s(cost_model: RooflineCostModel, tokens: float, weight_dtype: str) -> float:
    """Llama-3.1-8B's four layer GEMMs at `tokens` tokens, times its layers, by hand."""
    gpu, model = cost_model.gpu, cost_model.model
    shapes = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
    return model.num_layers * sum(
        float(gemm_seconds(tokens, n, k, peak_flops=gpu.peak_flops.for_weights(weight_dtype),
                           memory_bw=gpu.memory_bandwidth_bytes_per_s,
                           weight_bytes=bytes_per_element(weight_dtype),
                           sm_count=gpu.parallel_units,
                           eff=gpu.efficiency.for_weights(weight_dtype)))
        for n, k in shapes)


def test_fp8_layer_gemms_run_at_the_fp8_tables_own_keys() -> None:
    cost_model = _cost_model(gpu="h200-sxm", weight_dtype="fp8")
    fp8 = cost_model.gpu.efficiency.gemm_by_weights["fp8"]
    assert fp8["gemm_peak_efficiency"] != cost_model.gpu.efficiency.gemm_peak_efficiency
    lm_head = _cost_model(gpu="h200-sxm", weight_dtype="bf16")._lm_head_gemm.cost(1.0)[0]
    step = _prefill(cost_model, 2048)
    assert step.linear_s == pytest.approx(_layer_gemms_s(cost_model, 2048.0, "fp8") + lm_head,
                                          rel=1e-12)


def test_an_fp8_block_leaves_bf16_steps_bit_for_bit_alone() -> None:
    import dataclasses

    gpu = load_gpu_profile("h200-sxm")
    plain = dataclasses.replace(gpu, efficiency=dataclasses.replace(
        gpu.efficiency, gemm_by_weights={}))
    model = load_model("llama-3.1-8b")
    new, ctx = np.array([1, 1, 700], dtype=np.int64), np.array([300, 5000, 0], dtype=np.int64)
    with_block, without = (
        RooflineCostModel(model, g, tensor_parallel=1, weight_dtype="bf16", kv_dtype="bf16")
        .step_time(new, ctx, 3) for g in (gpu, plain))
    assert with_block == without
    fp8, fp8_plain = (
        RooflineCostModel(model, g, tensor_parallel=1, weight_dtype="fp8", kv_dtype="bf16")
        .step_time(new, ctx, 3) for g in (gpu, plain))
    assert fp8.linear_s != fp8_plain.linear_s  # without the block fp8 borrows the bf16 keys


def test_the_activation_quantisation_kernel_costs_per_token() -> None:
    eff = load_gpu_profile("h200-sxm").efficiency.for_weights("fp8")
    assert eff.gemm_quant_token_s > 0

    def small_gemm_s(tokens: float) -> float:  # narrow rows: the per-token cost dominates
        return float(gemm_seconds(tokens, 64.0, 64.0, peak_flops=1.978e15, memory_bw=4.8e12,
                                  weight_bytes=1.0, sm_count=132.0, eff=eff))

    added = small_gemm_s(16384.0) - small_gemm_s(8192.0)
    assert added == pytest.approx(8192 * eff.gemm_quant_token_s, rel=0.2)


def test_breakdown_sums_to_the_total() -> None:
    cost_model = _cost_model("llama-3.1-70b", tensor_parallel=4)
    new = np.array([1, 1, 1, 300], dtype=np.int64)
    ctx = np.array([50, 900, 4000, 700], dtype=np.int64)
    step = cost_model.step_time(new, ctx, 3)
    parts = step.linear_s + step.attention_s + step.communication_s + step.overhead_s
    assert step.seconds == pytest.approx(parts)
    assert min(step.linear_s, step.attention_s, step.communication_s, step.overhead_s) > 0


def test_bounded_cache_gives_the_same_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cost_model_module, "_MAX_CACHE_ENTRIES", 3)
    small_cache, fresh = _cost_model(), _cost_model()
    for batch in range(1, 20):
        _decode(small_cache, batch, 100)
    # Cleared when full, then refilled with one block of neighbouring token counts.
    assert len(small_cache._layer_cache) <= 3 + cost_model_module._LAYER_BLOCK
    for batch in (1, 7, 19):
        assert _decode(small_cache, batch, 100) == _decode(fresh, batch, 100)


@pytest.mark.parametrize("tensor_parallel", [1, 4])
def test_layer_costs_priced_in_blocks_equal_the_one_count_formula(tensor_parallel: int) -> None:
    cost_model = _cost_model("llama-3.1-70b", tensor_parallel=tensor_parallel)
    gemms = cost_model._layer_gemms
    for tokens in (1, 255, 256, 257, 4097, 16383):
        linear_s, communication_s, bound = cost_model._layer_cost(tokens)
        m = float(tokens)
        n = np.array([shape[0] for shape in gemms._shapes], dtype=np.float64)
        k = np.array([shape[1] for shape in gemms._shapes], dtype=np.float64)
        one_by_one = gemm_seconds(m, n, k, peak_flops=gemms._peak_flops,
                                  memory_bw=gemms._gpu.memory_bandwidth_bytes_per_s,
                                  weight_bytes=gemms._weight_bytes,
                                  sm_count=gemms._gpu.parallel_units, eff=gemms._gpu.efficiency)
        assert linear_s == float(np.sum(one_by_one)) * gemms._repeats
        expected_communication = 0.0
        if tensor_parallel > 1:
            expected_communication = cost_model._allreduce_count * float(allreduce_seconds(
                m * cost_model._allreduce_bytes_per_token, float(tensor_parallel),
                link_bw=cost_model.gpu.intra_node_bandwidth_bytes_per_s,
                eff=cost_model.gpu.efficiency))
        assert communication_s == expected_communication
        compute_s, memory_s = gemm_parts(m, n, k, peak_flops=gemms._peak_flops,
                                         memory_bw=gemms._gpu.memory_bandwidth_bytes_per_s,
                                         weight_bytes=gemms._weight_bytes,
                                         sm_count=gemms._gpu.parallel_units,
                                         eff=gemms._gpu.efficiency)
        assert bound == bool(np.sum(compute_s) > np.sum(memory_s))


def test_empty_or_malformed_steps_are_errors() -> None:
    cost_model = _cost_model()
    empty = np.zeros(0, dtype=np.int64)
    with pytest.raises(ValueError, match="empty step"):
        cost_model.step_time(empty, empty, 0)
    with pytest.raises(ValueError, match="shape"):
        cost_model.step_time(np.ones(2, dtype=np.int64), np.ones(3, dtype=np.int64), 2)


def test_swap_moves_each_gpus_shard_over_its_own_pcie_link() -> None:
    tp1 = _cost_model("llama-3.1-70b", tensor_parallel=1)
    tp4 = _cost_model("llama-3.1-70b", tensor_parallel=4)
    assert tp1.swap_time(0) == 0.0
    assert tp1.swap_time(2000) > tp1.swap_time(1000)
    latency = load_gpu_profile("h100-sxm").p2p_latency_s
    assert tp4.swap_time(1000) - latency == pytest.approx((tp1.swap_time(1000) - latency) / 4)


@pytest.mark.benchmark
def test_step_time_speed(benchmark: Callable[..., object]) -> None:
    cost_model = _cost_model()
    new = np.ones(32, dtype=np.int64)
    ctx = np.full(32, 700, dtype=np.int64)
    benchmark(cost_model.step_time, new, ctx, 32)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3"])
def test_small_and_large_batches_sum_a_mixed_step_the_same_way(
        model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefill sums are taken in plain Python up to a batch size and with numpy above it:
    every mixed step costs the same, to the bit, whichever way it is summed."""
    cost_model = _cost_model(model, tensor_parallel=8 if model == "deepseek-v3" else 1)
    rng = np.random.default_rng(7)
    shapes = []
    for size in (1, 2, 9, 40, 64, 65, 200):
        new = np.where(rng.random(size) < 0.3, rng.integers(2, 3000, size), 1)
        shapes.append((new, rng.integers(0, 8000, size)))

    def costs() -> list[float]:
        return [cost_model.step_time(new, context, int((new >= 1).sum())).seconds
                for new, context in shapes]

    monkeypatch.setattr(cost_model_module, "_PYTHON_SUMS_MAX_SEQS", 10**9)
    in_python = costs()
    monkeypatch.setattr(cost_model_module, "_PYTHON_SUMS_MAX_SEQS", 0)
    assert costs() == in_python


@pytest.mark.parametrize("num_seqs", [3, 256])
def test_each_data_parallel_rank_pays_the_per_sequence_time_of_its_own_sequences(
        num_seqs: int) -> None:
    """Every rank runs its own scheduler: a step's per-sequence time is the busiest rank's
    (an eighth of the batch on eight ranks, at least one sequence), the fixed part once."""
    gpu = load_gpu_profile("h200-sxm")
    eff = gpu.efficiency
    layouts = {"tp": {}, "dp": {"expert_parallel": 8, "data_parallel_attention": True}}
    overheads = {}
    for name, layout in layouts.items():
        cost = RooflineCostModel(load_model("deepseek-v3"), gpu, tensor_parallel=8,
                                 weight_dtype="fp8", kv_dtype="bf16", **layout)
        step = cost.step_time(np.ones(num_seqs, dtype=np.int64), np.full(num_seqs, 1000),
                              num_seqs)
        overheads[name] = step.overhead_s
    assert overheads["tp"] == pytest.approx(eff.step_overhead_s + eff.per_seq_overhead_s
                                            * num_seqs)
    assert overheads["dp"] == pytest.approx(eff.step_overhead_s + eff.per_seq_overhead_s
                                            * max(num_seqs / 8, 1.0))
