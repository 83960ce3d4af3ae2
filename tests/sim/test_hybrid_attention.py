"""Hybrid-attention models: per-layer kinds from configs and the library, their cache bytes by
hand, the memory plan's per-sequence blocks, the hybrid block pool, the cost model's hybrid
terms (a decode stretch equal to single steps bit for bit), and KV use past the window."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import plan_memory
from batchsim.gpu.model_spec import ModelError, load_hf_config, load_model
from batchsim.policies.continuous import ContinuousBatching
from batchsim.sim.engine import Simulation
from batchsim.sim.kv_cache import KVCacheError
from batchsim.sim.kv_hybrid import HybridKVBlockPool
from batchsim.sim.request import RequestStatus
from batchsim.sim.traffic import OpenLoopTraffic
from tests.policies.test_invariants import LinearCost as _FlatCost

_MODELS = Path(str(files("batchsim.hardware_profiles"))) / "models"
_BF16 = 2.0

# Hand computations from each config.json: 2 (K and V) x layers x KV heads x head_dim x 2 bytes
# for the full and the sliding layers; linear layers' state = layers x ((conv_kernel - 1) x
# (2 x key heads x key_dim + value heads x value_dim) + value heads x key_dim x value_dim) x 2.
_CACHE_BYTES = {  # name: (config file, full bytes/token, windowed bytes/token, state bytes/seq)
    "gpt-oss-120b": ("openai--gpt-oss-120b", 2 * 18 * 8 * 64 * 2, 2 * 18 * 8 * 64 * 2, 0),
    "gpt-oss-20b": ("openai--gpt-oss-20b", 2 * 12 * 8 * 64 * 2, 2 * 12 * 8 * 64 * 2, 0),
    "gemma-3-27b": ("google--gemma-3-27b-it", 2 * 10 * 16 * 128 * 2, 2 * 52 * 16 * 128 * 2, 0),
    "qwen3-next-80b-a3b": ("Qwen--Qwen3-Next-80B-A3B-Instruct", 2 * 12 * 2 * 256 * 2, 0,
                           36 * (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2),
    "qwen3.5-397b-a17b": ("Qwen--Qwen3.5-397B-A17B", 2 * 15 * 2 * 256 * 2, 0,
                          45 * (3 * (2 * 16 * 128 + 64 * 128) + 64 * 128 * 128) * 2),
    # Full attention everywhere; MLA caches one latent of kv_lora_rank + rope per layer.
    "kimi-k2.5": ("moonshotai--Kimi-K2.5", 61 * (512 + 64) * 2, 0, 0),
    "glm-4.7": ("zai-org--GLM-4.7", 2 * 92 * 8 * 128 * 2, 0, 0),
    "minimax-m2.5": ("MiniMaxAI--MiniMax-M2.5", 2 * 62 * 8 * 128 * 2, 0, 0),
}


@pytest.mark.parametrize(("name", "expected"), sorted(_CACHE_BYTES.items()))
def test_cache_bytes_match_a_hand_computation(name: str, expected: tuple) -> None:
    config, full, windowed, state = expected
    for spec in (load_model(name), load_hf_config(_MODELS / f"{config}_config.json")):
        assert spec.kv_bytes_per_token(_BF16) == full
        assert spec.windowed_kv_bytes_per_token(_BF16) == windowed
        assert spec.state_bytes_per_sequence() == state


@pytest.mark.parametrize("name", sorted(_CACHE_BYTES))
def test_the_shipped_configs_give_the_library_models(name: str) -> None:
    library = load_model(name)
    config = load_hf_config(_MODELS / f"{_CACHE_BYTES[name][0]}_config.json")
    assert config.layer_kinds == library.layer_kinds
    assert config.weight_params() == library.weight_params()
    assert config.weight_params() == pytest.approx(library.num_params, rel=0.02)


def test_a_sequence_holds_the_window_and_no_more() -> None:
    gemma = load_model("gemma-3-27b")  # 10 full layers, 52 sliding ones of 1024 tokens
    full, windowed = 81920, 425984
    assert gemma.kv_bytes_per_sequence(500, _BF16) == full * 500 + windowed * 500
    assert gemma.kv_bytes_per_sequence(8000, _BF16) == full * 8000 + windowed * 1024
    qwen = load_model("qwen3-next-80b-a3b")
    state = _CACHE_BYTES["qwen3-next-80b-a3b"][3]
    assert qwen.kv_bytes_per_sequence(1, _BF16) == 24576 + state
    assert qwen.kv_bytes_per_sequence(100_000, _BF16) == 24576 * 100_000 + state


def test_layer_types_intervals_and_patterns_are_read(tmp_path: Path) -> None:
    base = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
            "max_position_embeddings": 4096}
    cases: list[tuple[dict[str, object], tuple[int, int, int, int]]] = [
        ({"num_hidden_layers": 4, "sliding_window": 64,
          "layer_types": ["sliding_attention", "full_attention"] * 2}, (2, 2, 64, 0)),
        ({"num_hidden_layers": 12, "sliding_window": 512, "sliding_window_pattern": 6},
         (2, 10, 512, 0)),
        ({"num_hidden_layers": 8, "full_attention_interval": 4, "linear_num_key_heads": 2,
          "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
          "linear_conv_kernel_dim": 4}, (2, 0, 0, 6)),
    ]
    for index, (keys, (full, sliding, window, linear)) in enumerate(cases):
        path = tmp_path / f"c{index}.json"
        path.write_text(json.dumps({**base, **keys}))
        kinds = load_hf_config(path).layer_kinds
        assert kinds is not None
        assert (kinds.full, kinds.sliding, kinds.window, kinds.linear) == (full, sliding,
                                                                           window, linear)
    # Mistral's lone sliding_window stays full attention, as before.
    path = tmp_path / "mistral.json"
    path.write_text(json.dumps({**base, "num_hidden_layers": 4, "sliding_window": 4096}))
    assert load_hf_config(path).layer_kinds is None


@pytest.mark.parametrize(("keys", "message"), [
    ({"layer_types": ["full_attention", "chunked_attention"]}, "unknown layer type"),
    ({"layer_types": ["full_attention"]}, "one type for each of the 2 layers"),
    ({"layer_types": ["sliding_attention", "sliding_attention"]}, "at least one full"),
])
def test_bad_layer_types_are_one_line_errors(tmp_path: Path, keys: dict, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"hidden_size": 256, "num_attention_heads": 4,
                                "intermediate_size": 512, "vocab_size": 1000,
                                "max_position_embeddings": 4096, "num_hidden_layers": 2,
                                "sliding_window": 8, **keys}))
    with pytest.raises(ModelError, match=message) as caught:
        load_hf_config(path)
    assert "\n" not in str(caught.value)


def test_the_memory_plan_gives_each_sequence_its_window_in_blocks() -> None:
    plan = plan_memory(load_model("gpt-oss-120b"), load_gpu_profile("h200-sxm"),
                       tensor_parallel=1, weight_dtype="fp8", kv_dtype="bf16",
                       gpu_memory_utilization=0.9, block_size=16)
    assert plan.kv_bytes_per_token_per_gpu == 36864  # the full layers only
    assert plan.sequence_blocks == 128 // 16  # sliding layers as wide as the full ones
    qwen = plan_memory(load_model("qwen3-next-80b-a3b"), load_gpu_profile("h200-sxm"),
                       tensor_parallel=2, weight_dtype="fp8", kv_dtype="bf16",
                       gpu_memory_utilization=0.9, block_size=16)
    state_per_gpu = _CACHE_BYTES["qwen3-next-80b-a3b"][3] / 2
    assert qwen.sequence_blocks == -(-state_per_gpu // qwen.block_bytes)


def test_the_hybrid_pool_takes_and_returns_each_sequences_fixed_blocks() -> None:
    pool = HybridKVBlockPool(20, 4, sequence_blocks=3)
    assert pool.allocate(1, 9)  # 3 token blocks + 3 fixed
    assert pool.held(1) == 3 and pool.num_used == 6
    assert pool.allocate(1, 12) and pool.num_used == 6  # still inside the last block
    assert pool.grow_many([1, 2], [13, 4])  # one more for 1; 1 + 3 fixed for 2
    assert pool.num_used == 11
    assert not pool.allocate(3, 37)  # 10 + 3 > 9 free: nothing taken
    assert pool.num_used == 11
    pool.check_invariants()
    assert pool.free(1) == 7 and pool.free(2) == 4 and pool.num_used == 0
    pool.check_invariants()
    with pytest.raises(KVCacheError):
        pool.allocate_with_prefix(4, [1], 4)


def test_a_sequence_whose_fixed_blocks_overflow_the_pool_is_rejected() -> None:
    """18 blocks of its own and 3 fixed ones never fit 20: rejected, not preempted forever."""
    policy = ContinuousBatching(pool=HybridKVBlockPool(20, 4, sequence_blocks=3),
                                max_num_seqs=4, max_num_batched_tokens=256)
    traffic = OpenLoopTraffic(arrival_s=np.array([0.0, 0.1]), prompt_tokens=np.array([60, 60]),
                              output_tokens=np.array([12, 4]))
    first, second = Simulation([policy], _FlatCost(), traffic).run().requests
    assert first.status is RequestStatus.REJECTED and "needs 21 KV blocks" in first.reject_reason
    assert second.status is RequestStatus.FINISHED  # 16 + 3 blocks fit


def _cost(name: str) -> RooflineCostModel:
    return RooflineCostModel(load_model(name), load_gpu_profile("h200-sxm"), tensor_parallel=2,
                             weight_dtype="fp8", kv_dtype="bf16")


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["gpt-oss-20b", "gemma-3-27b", "qwen3-next-80b-a3b"]),
       contexts=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
       steps=st.integers(1, 300))
def test_a_decode_stretch_costs_what_its_steps_cost(name: str, contexts: list[int],
                                                    steps: int) -> None:
    """Past and across the window: the fast path's prices equal single steps bit for bit."""
    cost = _cost(name)
    ones = [1] * len(contexts)
    stretch = cost.decode_step_list(ones, contexts, len(contexts), steps)
    singles = [cost.step_time(np.array(ones), np.array(contexts) + j, len(contexts)).seconds
               for j in range(steps)]
    assert stretch == singles
    assert cost.step_seconds(ones, contexts, len(contexts)) == singles[0]


def test_sliding_layers_stop_costing_more_past_the_window() -> None:
    """Decode attention of the sliding layers is flat past the window: a hybrid step grows
    with the context at the full layers' rate only, and a linear layer costs the same at
    any context."""
    gemma, full_twin = _cost("gemma-3-27b"), RooflineCostModel(
        replace(load_model("gemma-3-27b"), layer_kinds=None), load_gpu_profile("h200-sxm"),
        tensor_parallel=2, weight_dtype="fp8", kv_dtype="bf16")

    def decode(model: RooflineCostModel, context: int) -> float:
        return model.step_time(np.ones(32, dtype=np.int64), np.full(32, context), 32).seconds

    hybrid_growth = decode(gemma, 32_000) - decode(gemma, 16_000)
    twin_growth = decode(full_twin, 32_000) - decode(full_twin, 16_000)
    assert 0 < hybrid_growth < 0.3 * twin_growth  # 10 of 62 layers still grow
    qwen = _cost("qwen3-next-80b-a3b")
    assert decode(qwen, 2_000) < decode(qwen, 64_000)  # its 12 full layers
    assert qwen._hybrid is not None
    assert qwen._hybrid.linear_s(32, 32) > 0


def test_kv_use_of_a_long_sequence_stops_growing_by_the_window() -> None:
    """One long sequence on gpt-oss-20b: the blocks it holds are its full layers' blocks plus
    a fixed window's worth, so its KV bytes past the window grow at the full layers' rate
    alone (half of what all-full attention would take), as the hand formula says."""
    model, gpu = load_model("gpt-oss-20b"), load_gpu_profile("h200-sxm")
    plan = plan_memory(model, gpu, tensor_parallel=1, weight_dtype="fp8", kv_dtype="bf16",
                       gpu_memory_utilization=0.9, block_size=16)
    pool = HybridKVBlockPool(plan.num_blocks, 16, sequence_blocks=plan.sequence_blocks)
    policy = ContinuousBatching(pool=pool, max_num_seqs=8, max_num_batched_tokens=8192)
    cost = RooflineCostModel(model, gpu, tensor_parallel=1, weight_dtype="fp8",
                             kv_dtype="bf16")
    traffic = OpenLoopTraffic(arrival_s=np.array([0.0]), prompt_tokens=np.array([100]),
                              output_tokens=np.array([3000]))
    record = Simulation([policy], cost, traffic, fast_path=True).run()
    used_blocks = record.steps.column("kv_used_blocks")[:-1]  # the last step's: after freeing
    tokens = 100 + np.arange(used_blocks.size)  # step 0 prefills 100; each later adds one
    held_bytes = used_blocks * plan.block_bytes
    window_bytes = held_bytes - np.ceil(tokens / 16) * plan.block_bytes
    assert (window_bytes == plan.sequence_blocks * plan.block_bytes).all()
    by_hand = np.array([model.kv_bytes_per_sequence(int(n), _BF16) for n in tokens])
    assert (held_bytes >= by_hand).all()  # rounded up to whole blocks; a short one pays
    past = tokens >= 128  # the whole window: exact once the window is full
    assert (held_bytes[past] - by_hand[past] < plan.block_bytes).all()
    late = slice(1000, None)  # well past the 128-token window
    slope = np.polyfit(tokens[late], held_bytes[late], 1)[0]
    assert slope == pytest.approx(model.kv_bytes_per_token(_BF16), rel=0.01)
