"""An NVFP4 KV cache: its bytes with the block scales, the room it leaves, the decode reads it
saves, and its refusal on GPUs without FP4 tensor cores (docs/background/model.md,
"Quantisation")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from batchsim.experiment.loader import ConfigError
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import DtypeError
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.memory import plan_memory
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.moe_layout import Parallelism, kv_bytes_per_token_per_gpu
from tests.cli_checks import fails_cleanly
from tests.validation.experiment_builder import base_experiment, run_dict

LLAMA_8B = load_model("llama-3.1-8b")
B200 = load_gpu_profile("b200")


def test_a_token_costs_its_fp4_values_and_their_scales() -> None:
    # K and V of 32 layers x 8 KV heads x 128 dims, 4 bits each plus an 8-bit scale per 16.
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, Parallelism(1), "nvfp4") == \
        2 * 32 * 8 * 128 * (4.5 / 8)
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, Parallelism(2), "nvfp4") == \
        2 * 32 * 4 * 128 * (4.5 / 8)


def test_the_cache_holds_what_memory_leaves_at_its_bytes() -> None:
    plans = {kv: plan_memory(LLAMA_8B, B200, tensor_parallel=1, weight_dtype="bf16",
                             kv_dtype=kv, gpu_memory_utilization=0.9, block_size=16)
             for kv in ("fp8", "nvfp4")}
    fp8, fp4 = plans["fp8"], plans["nvfp4"]
    assert fp4.block_bytes == fp8.block_bytes * 4.5 / 8
    # The same free memory, floored to whole blocks of each size: the fp4 pool holds 8 / 4.5
    # times the fp8 pool's blocks, to within the blocks' rounding.
    ratio = 8 / 4.5
    assert fp8.num_blocks * ratio - 1 < fp4.num_blocks < (fp8.num_blocks + 1) * ratio


def test_decode_reads_fewer_bytes_with_an_fp4_cache() -> None:
    new, context = np.ones(64, dtype=np.int64), np.full(64, 8000, dtype=np.int64)
    steps = {kv: RooflineCostModel(LLAMA_8B, B200, tensor_parallel=1, weight_dtype="bf16",
                                   kv_dtype=kv).step_time(new, context, 64)
             for kv in ("bf16", "fp8", "nvfp4")}
    assert steps["nvfp4"].attention_s < steps["fp8"].attention_s < steps["bf16"].attention_s
    assert steps["nvfp4"].linear_s == steps["fp8"].linear_s  # the weights are the same


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200-sxm", "a100-sxm-80gb"])
def test_a_gpu_without_fp4_cores_is_refused(gpu: str) -> None:
    with pytest.raises(DtypeError, match=f"nvfp4 KV cache needs FP4 tensor cores.*{gpu}"):
        plan_memory(LLAMA_8B, load_gpu_profile(gpu), tensor_parallel=1, weight_dtype="bf16",
                    kv_dtype="nvfp4", gpu_memory_utilization=0.9, block_size=16)


def test_an_experiment_names_the_key(tmp_path: Path) -> None:
    arms = [{"name": "c", "kind": "continuous"}]
    with pytest.raises(DtypeError, match=r"^dtype\.kv_cache: an nvfp4 KV cache needs FP4"):
        run_dict(tmp_path, base_experiment(hardware="h100-sxm", dtype={"kv_cache": "nvfp4"},
                                           policies=arms))
    on_hopper = [{"name": "h", "kind": "continuous", "deployment": {"hardware": "h100-sxm"}}]
    with pytest.raises((ConfigError, ValueError), match=r"policies\.0\.deployment: .*FP4"):
        run_dict(tmp_path, base_experiment(hardware="b200", dtype={"kv_cache": "nvfp4"},
                                           policies=on_hopper))
    result = run_dict(tmp_path, base_experiment(hardware="b200", dtype={"kv_cache": "nvfp4"},
                                                policies=arms))
    assert result.arms[0].metrics["completed"] > 0


def test_validate_refuses_it_in_one_line(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump(base_experiment(hardware="h200-sxm",
                                                  dtype={"kv_cache": "nvfp4"})),
                   encoding="utf-8")
    fails_cleanly(["validate", str(exp)],
                  "dtype.kv_cache: an nvfp4 KV cache needs FP4 tensor cores", "h200-sxm has none")
