"""Memory per GPU under pipeline parallelism: each GPU holds its stage's layers (gpu/memory.py)."""

from __future__ import annotations

import math

import pytest

from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import MemoryPlan, plan_memory, weights_bytes_per_gpu
from batchsim.gpu.model_spec import ModelError, load_model

H100 = load_gpu_profile("h100-sxm")
LLAMA_8B = load_model("llama-3.1-8b")  # 32 layers, hidden 4096, 32/8 heads of 128, MLP 14336

# One layer's projections, counted by hand: QKV 4096·(32 + 2·8)·128, O 32·128·4096, gate/up/
# down 3·4096·14336.
PER_LAYER = 25_165_824 + 16_777_216 + 176_160_768
VOCAB_ROWS = 128_256 * 4096  # embedding (or LM head) matrix, untied in Llama-3.1-8B


def _plan(pp: int, tp: int = 1) -> MemoryPlan:
    return plan_memory(LLAMA_8B, H100, tensor_parallel=tp, weight_dtype="bf16",
                       kv_dtype="bf16", gpu_memory_utilization=0.9, block_size=16,
                       pipeline_parallel=pp)


def test_two_stages_halve_the_layers_each_gpu_holds() -> None:
    whole = 32 * PER_LAYER * 2 + (2 * VOCAB_ROWS + 65 * 4096) * 2
    # The last stage: 16 layers, the LM head and the final norm (the first has the embedding).
    last = 16 * PER_LAYER * 2 + (VOCAB_ROWS + 33 * 4096) * 2
    assert weights_bytes_per_gpu(LLAMA_8B, 1, "bf16") == whole == 16_060_522_496
    assert weights_bytes_per_gpu(LLAMA_8B, 1, "bf16", pipeline_parallel=2) == last
    assert last == 8_030_265_344 == pytest.approx(whole / 2, rel=1e-4)


def test_the_kv_pool_is_sized_per_stage_by_the_fullest_stage() -> None:
    one, two = _plan(1), _plan(2)
    # Each stage caches every token's KV for its 16 layers: half the bytes per token per GPU.
    assert two.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu / 2 == 65_536
    usable = H100.memory_bytes * 0.9
    expected = math.floor((usable - 8_030_265_344 - H100.runtime_reserve_bytes) / (16 * 65_536))
    assert two.num_blocks == expected
    # Half the weights and half the KV per token per GPU: more than twice the tokens.
    assert two.max_cached_tokens > 2 * one.max_cached_tokens
    assert two.pipeline_parallel == 2


def test_describe_names_the_layout_only_when_pipelined() -> None:
    assert " on 1x h100-sxm: " in _plan(1).describe()
    assert " on 4x (TP2 x PP2, last stage) h100-sxm: " in _plan(2, tp=2).describe()


def test_a_stage_count_that_does_not_divide_the_layers_is_an_error() -> None:
    with pytest.raises(ModelError, match="32 layers, which pipeline_parallel=3 does not divide"):
        _plan(3)
