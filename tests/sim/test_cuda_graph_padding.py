"""CUDA-graph padding: a step the engine runs as a graph computes its layers at the graph's size;
attention, the LM head and steps past the largest size are untouched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchsim.experiment.engine_profile import EngineProfileError, load_engine_profile
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.graph_padding import GraphPadding
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model

GPU = load_gpu_profile("h100-sxm")
MODEL = load_model("llama-3.1-8b")
SIZES = (1, 2, 4, 8, 16, 24, 32)


def _cost(padding: GraphPadding | None, tp: int = 1) -> RooflineCostModel:
    gpu = dataclasses.replace(GPU, graph_padding=padding)
    return RooflineCostModel(MODEL, gpu, tensor_parallel=tp, weight_dtype="bf16",
                             kv_dtype="bf16")


def _decode(num_seqs: int, context: int = 500) -> tuple[np.ndarray, np.ndarray]:
    return np.ones(num_seqs, dtype=np.int64), np.full(num_seqs, context, dtype=np.int64)


def test_the_table_rounds_each_count_up_to_the_next_size() -> None:
    assert GraphPadding((1, 2, 4, 8)).table() == [0, 1, 2, 4, 4, 8, 8, 8, 8]


@pytest.mark.parametrize("sizes", [(), (4, 2), (0, 1), (2, 2)])
def test_sizes_that_no_engine_captures_are_refused(sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="CUDA-graph sizes"):
        GraphPadding(sizes)


@pytest.mark.parametrize("tp", [1, 2])
def test_a_decode_step_costs_its_layers_at_the_graph_size_and_its_attention_as_it_is(
        tp: int) -> None:
    padded, bare = _cost(GraphPadding(SIZES), tp), _cost(None, tp)
    step = padded.step_time(*_decode(17), num_emitting=17)
    at_size = bare.step_time(*_decode(24), num_emitting=17)  # the 24-row graph, 17 real rows
    as_is = bare.step_time(*_decode(17), num_emitting=17)
    assert step.linear_s == at_size.linear_s > as_is.linear_s
    assert step.communication_s == at_size.communication_s
    assert step.attention_s == as_is.attention_s
    assert step.overhead_s == as_is.overhead_s  # per real sequence, not per padding row


def test_a_step_past_the_largest_size_runs_at_its_own_size() -> None:
    padded, bare = _cost(GraphPadding(SIZES)), _cost(None)
    assert (padded.step_time(*_decode(33), num_emitting=33).seconds
            == bare.step_time(*_decode(33), num_emitting=33).seconds)


def test_decode_only_graphs_leave_a_mixed_step_at_its_own_size() -> None:
    new = np.array([1, 1, 9], dtype=np.int64)  # two decodes and a 9-token chunk: 11 tokens
    context = np.array([100, 100, 0], dtype=np.int64)
    decode_only = _cost(GraphPadding(SIZES, decode_only=True)).step_time(new, context, 3)
    any_step = _cost(GraphPadding(SIZES)).step_time(new, context, 3)
    bare = _cost(None).step_time(new, context, 3)
    assert decode_only.seconds == bare.seconds
    assert any_step.linear_s == _cost(None).step_time(
        np.array([1, 1, 14]), context, 3).linear_s  # the 16-token graph


@given(num_seqs=st.integers(1, 40), steps=st.integers(1, 60), context=st.integers(0, 3000),
       decode_only=st.booleans())
def test_the_fast_path_prices_padded_stretches_as_single_steps(
        num_seqs: int, steps: int, context: int, decode_only: bool) -> None:
    cost = _cost(GraphPadding(SIZES, decode_only=decode_only))
    new, contexts = _decode(num_seqs, context)
    stretch = cost.decode_step_list(new.tolist(), contexts.tolist(), num_seqs, steps)
    singles = [cost.step_seconds(new.tolist(), (contexts + j).tolist(), num_seqs)
               for j in range(steps)]
    assert stretch == singles
    assert stretch == cost.decode_step_seconds(new, contexts, num_seqs, steps).tolist()


def test_each_engine_profile_sets_its_own_graphs() -> None:
    vllm = load_engine_profile("vllm").on_gpu(GPU).graph_padding
    sglang = load_engine_profile("sglang").on_gpu(GPU).graph_padding
    trtllm = load_engine_profile("trtllm").on_gpu(GPU).graph_padding
    assert vllm is not None and not vllm.decode_only and vllm.sizes[-1] == 512
    assert sglang is not None and sglang.decode_only and sglang.sizes[-1] == 256
    assert trtllm is not None and trtllm.decode_only and trtllm.sizes[-1] == 256
    assert load_engine_profile("none").on_gpu(GPU).graph_padding is None


def test_a_profile_with_unordered_sizes_is_refused_by_key(tmp_path: Path) -> None:
    bad = tmp_path / "mine.yaml"
    bad.write_text("name: mine\ncuda_graphs: {sizes: [1, 8, 4]}\n", encoding="utf-8")
    with pytest.raises(EngineProfileError, match=r"mine\.yaml: cuda_graphs\.sizes: .*ascending"):
        load_engine_profile(str(bad))
    bad.write_text("name: mine\ncuda_graphs: {sizes: [1], steps: prefill}\n", encoding="utf-8")
    with pytest.raises(EngineProfileError, match=r"mine\.yaml: cuda_graphs\.steps: "):
        load_engine_profile(str(bad))
