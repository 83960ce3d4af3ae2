"""The operator terms that depend on how work splits over the SMs (batchsim/gpu/roofline.py)."""

from __future__ import annotations

import dataclasses
from itertools import accumulate
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import RooflineEfficiency, load_gpu_profile
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.roofline import (
    DECODE_SPLIT_MIN_TOKENS,
    DecodeAttentionTerms,
    decode_attention_from_terms,
    decode_attention_over_steps,
    decode_attention_step_list,
    decode_attention_variable_seconds,
    gemm_parts,
    gemm_wave_efficiency,
    overlap_linear,
)

_SMS = 108.0
_BW = 2.0e12


def _eff(**values: Any) -> RooflineEfficiency:
    """The A100 profile's efficiencies with some keys replaced."""
    return dataclasses.replace(load_gpu_profile("a100").efficiency, **values)


def _decode_s(num_seqs: float, context: float, q_heads: float, kv_heads: float,
              eff: RooflineEfficiency) -> float:
    return float(decode_attention_variable_seconds(
        num_seqs, num_seqs * context, q_heads=q_heads, kv_heads=kv_heads, head_dim=128.0,
        kv_bytes=2.0, memory_bw=_BW, sm_count=_SMS, eff=eff,
    ))


def _kv_seconds_per_token(num_seqs: float, q_heads: float, kv_heads: float,
                          eff: RooflineEfficiency) -> float:
    """Marginal decode time of one more cached token per sequence, per token read."""
    long, longer = (_decode_s(num_seqs, c, q_heads, kv_heads, eff) for c in (60_000, 70_000))
    return (longer - long) / (num_seqs * 10_000)


# KV streaming alone: no per-unit work, no fixed kernels.
_STREAM_ONLY = {"decode_per_seq_head_s": 0.0, "decode_combine_s": 0.0, "decode_regroup_s": 0.0,
                "decode_overlap_fraction": 1.0}


def test_an_unsplit_decode_reads_kv_slower_with_fewer_units_than_saturate_hbm() -> None:
    eff = _eff(**_STREAM_ONLY, decode_mha_split_kv=False, decode_unsplit_fill=0.5)
    full_rate = 2 * 8 * 128 * 2 / (_BW * eff.kv_read_efficiency)  # one token, 8 KV heads
    saturating = 0.5 * _SMS  # 54 (sequence, KV head) units
    one_seq = _kv_seconds_per_token(1, 8, 8, eff)  # 8 units
    assert one_seq == pytest.approx(full_rate * saturating / 8)
    assert _kv_seconds_per_token(16, 8, 8, eff) == pytest.approx(full_rate)  # 128 units


def test_a_split_decode_keeps_the_bandwidth_with_few_sequences() -> None:
    eff = _eff(**_STREAM_ONLY, decode_mha_split_kv=False, decode_unsplit_fill=0.5,
               decode_split_fill=0.01)
    full_rate = 2 * 8 * 128 * 2 / (_BW * eff.kv_read_efficiency)
    # Grouped queries always split; MHA splits only where the kernel does.
    assert _kv_seconds_per_token(1, 32, 8, eff) == pytest.approx(full_rate)
    mha_split = dataclasses.replace(eff, decode_mha_split_kv=True)
    assert _kv_seconds_per_token(1, 8, 8, mha_split) == pytest.approx(full_rate)


def test_per_unit_work_and_kv_streaming_overlap_by_the_fitted_fraction() -> None:
    assert overlap_linear(3.0, 1.0, 0.0) == 3.0  # the smaller part hides entirely
    assert overlap_linear(1.0, 3.0, 1.0) == 4.0  # back to back
    assert overlap_linear(3.0, 1.0, 0.25) == 3.25
    arrays = overlap_linear(np.array([3.0, 1.0]), np.array([1.0, 3.0]), 0.25)
    assert arrays.tolist() == [3.25, 3.25]


def test_the_combine_kernel_runs_only_for_split_sequences_longer_than_one_kv_tile() -> None:
    eff = _eff(decode_combine_s=5e-6, decode_regroup_s=0.0, decode_mha_split_kv=False)
    tile = DECODE_SPLIT_MIN_TOKENS

    def jump(q_heads: float, kv_heads: float) -> float:
        return (_decode_s(1, tile + 1, q_heads, kv_heads, eff)
                - _decode_s(1, tile, q_heads, kv_heads, eff))

    assert jump(32, 8) == pytest.approx(5e-6, rel=0.01)  # grouped: split, one combine kernel
    assert jump(8, 8) < 1e-7  # unsplit MHA: one more token, no second kernel


def test_grouped_queries_pay_the_regrouping_copies_only_with_several_kv_heads_and_seqs() -> None:
    eff = _eff(decode_regroup_s=6e-6)
    without = dataclasses.replace(eff, decode_regroup_s=0.0)
    extra = {
        (num_seqs, q, kv): _decode_s(num_seqs, 64, q, kv, eff)
        - _decode_s(num_seqs, 64, q, kv, without)
        for num_seqs in (1.0, 2.0) for q, kv in ((32.0, 8.0), (32.0, 1.0), (8.0, 8.0))
    }
    assert extra.pop((2.0, 32.0, 8.0)) == pytest.approx(6e-6)
    assert all(value == pytest.approx(0.0, abs=1e-15) for value in extra.values())


def test_a_gemm_one_wave_and_a_bit_waits_for_a_second_wave_unless_k_can_be_split() -> None:
    # 112 output tiles of 128 x 256 on 108 SMs: the second wave is 4 tiles.
    m, n = 128.0 * 8, 256.0 * 14
    assert gemm_wave_efficiency(m, n, 1024.0, sm_count=_SMS) == pytest.approx(112 / 216)
    # K = 4096 may be cut in four: 448 pieces fill 4.15 of 5 waves.
    assert gemm_wave_efficiency(m, n, 4096.0, sm_count=_SMS) == pytest.approx(448 / 540)
    # 96 tiles: one wave, 12 SMs idle.
    assert gemm_wave_efficiency(m, 256.0 * 12, 1024.0, sm_count=_SMS) == pytest.approx(96 / 108)


def test_the_wave_exponent_scales_only_the_compute_time() -> None:
    shape = {"peak_flops": 312e12, "memory_bw": _BW, "weight_bytes": 2.0, "sm_count": _SMS}
    flat = _eff(gemm_wave_exponent=0.0, gemm_ramp_k=0.0, gemm_ramp_tokens=0.0)
    tail = dataclasses.replace(flat, gemm_wave_exponent=1.0)
    m, n, k = 1024.0, 3584.0, 1024.0
    compute, memory = gemm_parts(m, n, k, eff=flat, **shape)
    compute_tail, memory_tail = gemm_parts(m, n, k, eff=tail, **shape)
    assert memory_tail == memory
    assert compute_tail == pytest.approx(compute * 216 / 112)


def test_each_tile_pays_a_fixed_share_of_its_k_loop() -> None:
    shape = {"peak_flops": 312e12, "memory_bw": _BW, "weight_bytes": 2.0, "sm_count": _SMS}
    eff = _eff(gemm_wave_exponent=0.0, gemm_ramp_tokens=0.0, gemm_ramp_k=100.0)
    no_ramp = dataclasses.replace(eff, gemm_ramp_k=0.0)
    # At K = ramp_k the FLOP rate is half the peak's.
    assert gemm_parts(4096.0, 4096.0, 100.0, eff=eff, **shape)[0] == pytest.approx(
        2 * gemm_parts(4096.0, 4096.0, 100.0, eff=no_ramp, **shape)[0]
    )


@pytest.mark.parametrize(("gpu", "model"), [("a100", "llama-2-7b"), ("a100", "llama-3.1-8b"),
                                            ("h100", "llama-3.1-8b"), ("l40s", "llama-2-7b")])
def test_many_decode_steps_at_once_equal_one_at_a_time_bit_for_bit(gpu: str, model: str) -> None:
    """Across the combine kernel's threshold and with the occupancy slowdown active."""
    cost_model = RooflineCostModel(load_model(model), load_gpu_profile(gpu), tensor_parallel=1,
                                   weight_dtype="bf16", kv_dtype="bf16")
    for batch in (1, 2, 5):
        new = np.ones(batch, dtype=np.int64)
        context = np.arange(100, 100 + batch, dtype=np.int64)  # means cross 128 tokens
        many = cost_model.decode_step_seconds(new, context, batch, 64)
        one = [cost_model.step_time(new, context + j, batch).seconds for j in range(64)]
        assert many.tolist() == one
        # The engine's list: priced in plain Python up to its step limit, by numpy beyond.
        for steps in (2, 17, 38, 39, 64):
            assert cost_model.decode_step_list(new.tolist(), context.tolist(), batch,
                                               steps) == one[:steps]


@settings(max_examples=100, deadline=None)
@given(contexts=st.lists(st.integers(0, 20_000), min_size=1, max_size=256),
       steps=st.integers(1, 60), emitting=st.booleans(), tp=st.sampled_from([1, 2, 4]))
def test_a_stretch_priced_in_python_equals_step_time_bit_for_bit(
        contexts: list[int], steps: int, emitting: bool, tp: int) -> None:
    """`decode_step_list`'s plain-Python pricing, with and without tensor parallelism."""
    cost_model = _h100_8b(tp)
    new = np.ones(len(contexts), dtype=np.int64)
    context = np.array(contexts, dtype=np.int64)
    num_emitting = len(contexts) if emitting else 0
    one = [cost_model.step_time(new, context + j, num_emitting).seconds for j in range(steps)]
    assert cost_model.decode_step_list([1] * len(contexts), contexts, num_emitting,
                                       steps) == one
    assert cost_model.decode_step_seconds(new, context, num_emitting, steps).tolist() == one


@settings(max_examples=150, deadline=None)
@given(contexts=st.lists(st.integers(0, 20_000), min_size=1, max_size=64),
       steps=st.integers(1, 120), fraction=st.floats(0.0, 1.2), tp=st.sampled_from([1, 2]))
def test_a_stretch_priced_up_to_the_next_arrival_is_a_prefix_of_the_whole(
        contexts: list[int], steps: int, fraction: float, tp: int) -> None:
    """`decode_step_list(..., within_s)`: the same steps bit for bit, as many as the whole
    when they fit in `within_s`, else up to one past the step that ends past it, and no
    further — across the switch to numpy (38 steps)."""
    cost_model = _h100_8b(tp)
    new = [1] * len(contexts)
    whole = cost_model.decode_step_list(new, contexts, len(contexts), steps)
    within_s = fraction * sum(whole)
    part = cost_model.decode_step_list(new, contexts, len(contexts), steps, within_s)
    assert part == whole[:len(part)]
    totals = list(accumulate(part))
    if len(part) < steps:  # stopped: the steps before the last add up past `within_s`
        assert len(part) >= 2 and totals[-2] > within_s
        assert len(part) == 2 or totals[-3] <= within_s


@pytest.mark.parametrize("crossing", [30, 36, 37, 38, 60])
def test_pricing_up_to_an_arrival_stops_at_the_switch_to_numpy_too(crossing: int) -> None:
    """The arrival lands so that the plain-Python part stops on its last step (crossing 36:
    the spare step is the 38th) or before it: priced no further than needed; or after it:
    numpy prices the rest in one call, as without an arrival."""
    cost_model = _h100_8b(1)
    contexts = [1000, 2000, 3000]
    whole = cost_model.decode_step_list([1] * 3, contexts, 3, 100)
    totals = list(accumulate(whole))
    within_s = (totals[crossing - 1] + totals[crossing]) / 2  # step `crossing` ends past it
    part = cost_model.decode_step_list([1] * 3, contexts, 3, 100, within_s)
    assert part == (whole[:crossing + 2] if crossing <= 36 else whole)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 20_000)), min_size=1,
                      max_size=80),
       decodes=st.integers(0, 40), emitting=st.integers(0, 120), tp=st.sampled_from([1, 4]))
def test_a_step_priced_from_lists_equals_step_time_bit_for_bit(
        steps: list[tuple[int, int]], decodes: int, emitting: int, tp: int) -> None:
    """`step_seconds` (the engine's single steps): prefills, mixed and pure-decode steps, in
    plain Python up to 64 sequences and through `step_time` beyond."""
    cost_model = _h100_8b(tp)
    new = [n for n, _ in steps] + [1] * decodes
    context = [c for _, c in steps] + list(range(decodes))
    expected = cost_model.step_time(np.array(new, dtype=np.int64),
                                    np.array(context, dtype=np.int64), emitting).seconds
    assert cost_model.step_seconds(new, context, emitting) == expected
    ones = [1] * len(context)  # the same batch decoding
    assert cost_model.step_seconds(ones, context, emitting) == cost_model.step_time(
        np.array(ones, dtype=np.int64), np.array(context, dtype=np.int64), emitting).seconds


def test_a_step_from_lists_with_no_new_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="no new tokens"):
        _h100_8b(1).step_seconds([0, 0], [5, 7], 0)


def _h100_8b(tp: int) -> RooflineCostModel:
    cached = _COST_MODELS.get(tp)
    if cached is None:
        cached = _COST_MODELS[tp] = RooflineCostModel(
            load_model("llama-3.1-8b"), load_gpu_profile("h100"), tensor_parallel=tp,
            weight_dtype="bf16", kv_dtype="bf16")
    return cached


_COST_MODELS: dict[int, RooflineCostModel] = {}


@settings(max_examples=300, deadline=None)
@given(first=st.integers(1, 200_000), batch=st.integers(1, 256), steps=st.integers(1, 300),
       fixed_s=st.floats(0.0, 1e-4), token_s=st.floats(1e-12, 1e-8),
       fraction=st.floats(0.0, 1.0), threshold_tokens=st.integers(0, 400),
       combine_s=st.sampled_from([0.0, 3e-6]), regroup_s=st.sampled_from([0.0, 2e-6]))
def test_a_stretchs_decode_attention_equals_the_general_formula_bit_for_bit(
        first: int, batch: int, steps: int, fixed_s: float, token_s: float, fraction: float,
        threshold_tokens: int, combine_s: float, regroup_s: float) -> None:
    """Whichever side of the overlap and of the split threshold the stretch starts and ends."""
    kv = np.arange(first, first + batch * steps, batch, dtype=np.int64)
    terms = DecodeAttentionTerms(fixed_s=fixed_s, token_s=token_s, overlap_fraction=fraction,
                                 split_threshold=float(threshold_tokens * batch),
                                 combine_s=combine_s, regroup_s=regroup_s)
    general = decode_attention_from_terms(kv.astype(np.float64), terms)
    assert decode_attention_over_steps(kv, terms).tolist() == general.tolist()
    assert [decode_attention_from_terms(float(k), terms) for k in kv.tolist()] == general.tolist()
    assert decode_attention_step_list(first, batch, steps, terms) == general.tolist()
