"""What a verification step costs: the linear layers price k + 1 tokens per sequence, while
attention reads each sequence's cache once in the decode kernel."""

from __future__ import annotations

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model


def _model(name: str, tp: int, weights: str = "bf16") -> RooflineCostModel:
    return RooflineCostModel(load_model(name), load_gpu_profile("h100-sxm"), tensor_parallel=tp,
                             weight_dtype=weights, kv_dtype="bf16")


def test_verification_reads_the_cache_once() -> None:
    model = _model("llama-3.1-70b", 4)
    seqs, k, context = 32, 4, np.full(32, 4000)
    decode = model.step_time(np.ones(seqs, dtype=np.int64), context, seqs)
    queries = np.full(seqs, k + 1)
    verify = model.step_time(queries, context, seqs * (k + 1), np.ones(seqs, dtype=bool))
    as_prefill = model.step_time(queries, context, seqs * (k + 1))
    # The cache read dominates decode attention; k more queries add k tokens to read each.
    assert verify.attention_s == pytest.approx(
        decode.attention_s * (4000 + k + 1) / (4000 + 1), rel=0.01)
    assert as_prefill.attention_s > 2 * verify.attention_s
    # The linear layers are priced for every token, as in any step of that many tokens.
    assert verify.linear_s == as_prefill.linear_s


def test_mla_verification_flops_grow_with_the_queries() -> None:
    """DeepSeek-V3's absorbed decode does ~2·(512 + 64) + 2·512 FLOPs per head per cached token
    per query. Split 8 ways (16 heads per GPU) it stays bound by reading the latent, so a
    second query costs nearly nothing; with data-parallel attention (all 128 heads on every
    GPU) it is compute-bound and a second query nearly doubles it."""
    deepseek, gpu = load_model("deepseek-v3"), load_gpu_profile("h100-sxm")
    seqs, context = 64, np.full(64, 8000)
    ratios = []
    for dp_attention in (False, True):
        model = RooflineCostModel(deepseek, gpu, tensor_parallel=8, weight_dtype="fp8",
                                  kv_dtype="bf16", expert_parallel=8,
                                  data_parallel_attention=dp_attention)
        decode = model.step_time(np.ones(seqs, dtype=np.int64), context, seqs)
        verify = model.step_time(np.full(seqs, 2), context, seqs * 2,
                                 np.ones(seqs, dtype=bool))
        ratios.append(verify.attention_s / decode.attention_s)
    split, replicated = ratios
    assert split == pytest.approx(1.0, abs=0.01)
    assert 1.5 < replicated < 2.0


def test_a_mixed_step_prices_verifications_and_prefills_apart() -> None:
    model = _model("llama-3.1-8b", 1)
    new = np.array([4, 4, 512])
    context = np.array([1000, 2000, 0])
    mixed = model.step_time(new, context, 9, np.array([True, True, False]))
    prefill_only = model.step_time(new[2:], context[2:], 1)
    verify_only = model.step_time(new[:2], context[:2], 8, np.array([True, True]))
    launch = model._layers * model._attention_launch_s
    # One launch per layer for the whole step, not one per kind of sequence.
    assert mixed.attention_s == pytest.approx(
        prefill_only.attention_s + verify_only.attention_s - launch, rel=1e-9)
