"""The fitted profiles reproduce the serving physics the simulator relies on (issue 3, item 5)."""

from __future__ import annotations

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.roofline import gemm_parts, gemm_seconds

CALIBRATED = ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "l40s"]


def _cost_model(gpu: str) -> RooflineCostModel:
    return RooflineCostModel(
        load_model("llama-3.1-8b"), load_gpu_profile(gpu),
        tensor_parallel=1, weight_dtype="bf16", kv_dtype="bf16",
    )


def _decode_s(cost_model: RooflineCostModel, batch: int, context: int) -> float:
    new, ctx = np.ones(batch, dtype=np.int64), np.full(batch, context, dtype=np.int64)
    return cost_model.step_time(new, ctx, batch).seconds


def _prefill_s(cost_model: RooflineCostModel, prompt: int) -> float:
    return cost_model.step_time(np.array([prompt]), np.array([0]), 1).seconds


@pytest.mark.parametrize("gpu_name", CALIBRATED)
def test_gemms_turn_compute_bound_after_tens_to_hundreds_of_tokens(gpu_name: str) -> None:
    gpu = load_gpu_profile(gpu_name)
    n, k = 14336 * 2, 4096  # Llama-3.1-8B's fused gate/up projection
    tokens = np.arange(1, 4097, dtype=np.float64)
    compute, memory = gemm_parts(
        tokens, n, k, peak_flops=gpu.peak_flops.bf16, memory_bw=gpu.memory_bandwidth_bytes_per_s,
        weight_bytes=2.0, sm_count=gpu.parallel_units, eff=gpu.efficiency,
    )
    crossover = int(tokens[np.argmax(compute > memory)])
    assert 20 <= crossover <= 500
    # Far past the crossover the GEMM runs near the fitted peak.
    seconds = gemm_seconds(
        8192.0, n, k, peak_flops=gpu.peak_flops.bf16,
        memory_bw=gpu.memory_bandwidth_bytes_per_s, weight_bytes=2.0,
        sm_count=gpu.parallel_units, eff=gpu.efficiency,
    )
    achieved = 2 * 8192 * n * k / seconds
    fitted_peak = gpu.peak_flops.bf16 * gpu.efficiency.gemm_peak_efficiency
    assert 0.85 * fitted_peak < achieved <= fitted_peak


@pytest.mark.parametrize("gpu_name", CALIBRATED)
def test_decode_step_is_nearly_flat_in_batch_and_grows_with_context(gpu_name: str) -> None:
    cost_model = _cost_model(gpu_name)
    assert _decode_s(cost_model, 8, 512) < 1.15 * _decode_s(cost_model, 1, 512)
    assert _decode_s(cost_model, 16, 8192) > 1.2 * _decode_s(cost_model, 16, 512)


@pytest.mark.parametrize("gpu_name", CALIBRATED)
def test_prefill_grows_linearly_then_super_linearly(gpu_name: str) -> None:
    cost_model = _cost_model(gpu_name)
    assert 1.8 < _prefill_s(cost_model, 4096) / _prefill_s(cost_model, 2048) < 2.3
    per_token_4k = _prefill_s(cost_model, 4096) / 4096
    per_token_64k = _prefill_s(cost_model, 65536) / 65536
    assert per_token_64k > 1.5 * per_token_4k
