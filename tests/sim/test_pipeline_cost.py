"""The pipelined step cost: fill, steady state, bubble and hand-offs (gpu/pipeline_cost.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import GpuProfile, load_gpu_profile
from batchsim.gpu.model_spec import ModelError, load_model
from batchsim.gpu.pipeline_cost import PipelineCostModel, build_cost_model
from batchsim.gpu.pipeline_stages import (
    boundary_bandwidths,
    boundary_crosses_node,
    check_pipeline_parallel,
)

A100 = load_gpu_profile("a100-sxm-80gb")  # 300 GB/s NVLink, 32 GB/s PCIe, 10 µs, 8 per node
LLAMA_70B = load_model("llama-3.1-70b")  # 80 layers, hidden 8192


def _pp(tp: int, pp: int, gpu: GpuProfile = A100) -> PipelineCostModel:
    model = build_cost_model(LLAMA_70B, gpu, tensor_parallel=tp, pipeline_parallel=pp,
                             weight_dtype="bf16", kv_dtype="bf16")
    assert isinstance(model, PipelineCostModel)
    return model


def _roofline(tp: int, *, layers: int = 80, overhead: bool = True) -> RooflineCostModel:
    gpu = A100 if overhead else replace(A100, efficiency=replace(
        A100.efficiency, step_overhead_s=0.0, per_seq_overhead_s=0.0))
    return RooflineCostModel(replace(LLAMA_70B, num_layers=layers), gpu, tensor_parallel=tp,
                             weight_dtype="bf16", kv_dtype="bf16")


def _decode(n: int, context: int = 1000) -> tuple[np.ndarray, np.ndarray, int]:
    return np.ones(n, dtype=np.int64), np.full(n, context, dtype=np.int64), n


def test_one_stage_is_the_existing_roofline_model_unchanged() -> None:
    one = build_cost_model(LLAMA_70B, A100, tensor_parallel=8, pipeline_parallel=1,
                           weight_dtype="bf16", kv_dtype="bf16")
    assert type(one) is RooflineCostModel
    batch = (np.array([1, 1, 700]), np.array([300, 900, 0]), 3)
    assert one.step_time(*batch) == _roofline(8).step_time(*batch)


def test_one_micro_batch_through_two_stages_is_the_whole_step_plus_one_handoff() -> None:
    # A lone 512-token prefill fills the pipeline: stage 1 runs layers 0-39, hands 512 tokens'
    # hidden states and residual to stage 2 over NVLink, which runs layers 40-79 and the LM
    # head; the scheduling overhead is paid once. That is the unpipelined TP4 step (same
    # layers, same all-reduces) plus the hand-off.
    prefill = (np.array([512]), np.array([0]), 1)
    handoff_s = 1e-5 + 512 * 8192 * 2 * 2 / 300e9  # latency + bytes / NVLink
    cost = _pp(4, 2).step_time(*prefill)
    assert cost.num_micro_batches == 1
    assert cost.transfer_s == pytest.approx(handoff_s, rel=1e-12)
    assert cost.seconds == pytest.approx(_roofline(4).step_time(*prefill).seconds + handoff_s,
                                         rel=1e-12)
    # Only one stage works at a time: the two stages are busy half the step, bar the hand-off.
    assert cost.bubble_fraction == pytest.approx(0.5 + handoff_s / (2 * cost.seconds), rel=1e-9)


def test_a_boundary_between_nodes_goes_over_the_slower_link() -> None:
    prefill = (np.array([512]), np.array([0]), 1)
    # TP8 x PP2 fills two 8-GPU nodes; the hand-off leaves the node (PCIe-bound NIC, 32 GB/s).
    assert _pp(8, 2).step_time(*prefill).transfer_s == pytest.approx(
        1e-5 + 512 * 8192 * 2 * 2 / 32e9, rel=1e-12)
    assert boundary_bandwidths(A100, 4, 4) == (300e9, 32e9, 300e9)
    assert [boundary_crosses_node(b, 2, 8) for b in range(7)] == [False] * 3 + [True] + [False] * 3


def test_full_pipeline_runs_one_micro_batch_per_stage_time() -> None:
    # PP sequences: one each per micro-batch; steady state is the busiest stage (the last, with
    # the LM head) running all four, unless one micro-batch's round trip is longer.
    stage = _roofline(2, layers=20, overhead=False)
    head = _roofline(2, layers=0, overhead=False)
    new, context, _ = _decode(1)
    body = stage.step_time(new, context, 0).seconds
    lm_head = head.step_time(*_decode(1)).seconds
    overhead = A100.efficiency.step_overhead_s + A100.efficiency.per_seq_overhead_s
    handoff = 1e-5 + 8192 * 2 * 2 / 300e9
    expected = max(4 * (overhead + body), 4 * (body + lm_head),
                   overhead + 4 * body + lm_head + 3 * handoff)
    cost = _pp(2, 4).step_time(*_decode(4))
    assert cost.num_micro_batches == 4
    assert cost.seconds == pytest.approx(expected, rel=1e-12)
    # About m = 4 stage times (the LM head adds a little); fill and drain would have charged
    # m + PP - 1 = 7.
    assert 4 * body < cost.seconds < 4.5 * body


def test_bubble_shrinks_as_sequences_grow_past_the_stages() -> None:
    model = _pp(2, 4)
    costs = [model.step_time(*_decode(n)) for n in (1, 2, 3, 4, 8, 32)]
    bubbles = [c.bubble_fraction for c in costs]
    assert bubbles == sorted(bubbles, reverse=True)
    # Below PP sequences the idle stages are the bubble, (PP - m) / PP of their time ...
    for n, bubble in zip((1, 2, 3), bubbles, strict=False):
        assert bubble == pytest.approx((4 - n) / 4, abs=0.01)
    # ... and with every stage busy only the LM head's extra work on the last stage is left.
    assert bubbles[3] < 0.05
    # While the bubble lasts, more sequences ride along at almost no cost.
    assert costs[2].seconds == pytest.approx(costs[0].seconds, rel=1e-9)
    assert [c.num_micro_batches for c in costs] == [1, 2, 3, 4, 4, 4]


@pytest.mark.parametrize(("tp", "pp"), [(4, 2), (2, 4), (8, 2)])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 17])
def test_decode_step_seconds_equals_step_time_element_for_element(tp: int, pp: int,
                                                                  n: int) -> None:
    model = _pp(tp, pp)
    rng = np.random.default_rng(n)
    new = np.ones(n, dtype=np.int64)
    context = rng.integers(0, 6000, size=n)
    steps = 40
    fast = model.decode_step_seconds(new, context, n, steps)
    slow = [model.step_time(new, context + k, n).seconds for k in range(steps)]
    assert fast.tolist() == slow  # exact: the fast path's results depend on it
    assert model.decode_step_list(new.tolist(), context.tolist(), n, steps) == slow
    assert fast[-1] > fast[0]  # the KV read grows


def test_prefill_and_decode_mixed_waits_for_the_slowest_micro_batch() -> None:
    model = _pp(2, 4)
    decodes = _decode(7, 2000)
    mixed = (np.r_[decodes[0], 2048], np.r_[decodes[1], 0], 8)
    alone = (np.array([2048]), np.array([0]), 1)
    # The chunk's micro-batch (two decodes ride with it) takes its whole round trip.
    assert model.step_time(*mixed).seconds > model.step_time(*alone).seconds
    assert model.step_time(*mixed).bubble_fraction > 0.5


def test_swap_moves_each_stage_its_own_layers_kv() -> None:
    pipelined, whole = _pp(4, 2), _roofline(4)
    assert pipelined.kv_bytes_per_token_per_gpu == whole.kv_bytes_per_token_per_gpu / 2
    assert pipelined.swap_time(1000) == pytest.approx(
        1e-5 + 1000 * 2 * 40 * 2 * 128 * 2 / 32e9, rel=1e-12)


def test_pipeline_degrees_that_do_not_split_the_layers_are_errors() -> None:
    with pytest.raises(ModelError, match=r"llama-3\.1-70b has 80 layers, which "
                                         r"pipeline_parallel=3 does not divide"):
        check_pipeline_parallel(LLAMA_70B, 3)
    with pytest.raises(ModelError, match=r"pipeline_parallel=160 .* 80 layers"):
        check_pipeline_parallel(LLAMA_70B, 160)
    with pytest.raises(ValueError, match="pipeline_parallel >= 2"):
        PipelineCostModel(LLAMA_70B, A100, tensor_parallel=8, pipeline_parallel=1,
                          weight_dtype="bf16", kv_dtype="bf16")
    with pytest.raises(ValueError, match="empty step"):
        _pp(4, 2).step_time(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0)


def test_a_model_with_leading_dense_layers_refuses_pipeline_stages() -> None:
    from dataclasses import replace

    from batchsim.gpu.model_spec import ModelError, load_model
    from batchsim.gpu.pipeline_stages import check_pipeline_parallel

    deepseek = replace(load_model("deepseek-v3"), num_layers=60)  # 61 has no divisor anyway
    with pytest.raises(ModelError, match="first 3 layers are dense"):
        check_pipeline_parallel(deepseek, 2)
    check_pipeline_parallel(load_model("mixtral-8x7b"), 2)  # every layer alike: fine
