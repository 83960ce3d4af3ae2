"""Predicted operator times of measured rows, through the functions the cost model runs.

Each family maps its table's columns onto the arguments of a `gpu.roofline` function; nothing
here re-implements the physics.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from batchsim.calibration.tables import allreduce_message_bytes
from batchsim.gpu.dtypes import ACTIVATION_BYTES, bytes_per_element
from batchsim.gpu.hardware import GpuProfile, RooflineEfficiency
from batchsim.gpu.moe_experts import ExpertLoad, ExpertShape, routed_expert_parts
from batchsim.gpu.roofline import (
    allreduce_seconds,
    decode_attention_seconds,
    gemm_seconds,
    prefill_attention_seconds,
    prefill_attention_shape,
)

# The tables are bf16 throughout: weights, activations and KV cache are 2 bytes.
_BF16_BYTES = ACTIVATION_BYTES

Predictor = Callable[[pd.DataFrame, GpuProfile, RooflineEfficiency], np.ndarray]


def _column(rows: pd.DataFrame, name: str) -> np.ndarray:
    return rows[name].to_numpy(dtype=np.float64)


def predict_gemm(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return _gemm_with_weights(rows, gpu, eff, "bf16")


def predict_gemm_fp8(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return _gemm_with_weights(rows, gpu, eff, "fp8")


def predict_gemm_fp4(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return _gemm_with_weights(rows, gpu, eff, "nvfp4")


def _gemm_with_weights(
    rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency, weights: str
) -> np.ndarray:
    """The GEMM as the cost model prices a layer with `weights` weights: that dtype's peak,
    bytes and GEMM keys (for bf16: `eff` itself)."""
    return gemm_seconds(
        _column(rows, "m"), _column(rows, "n"), _column(rows, "k"),
        peak_flops=gpu.peak_flops.for_weights(weights),
        memory_bw=gpu.memory_bandwidth_bytes_per_s, weight_bytes=bytes_per_element(weights),
        sm_count=gpu.parallel_units, eff=eff.for_weights(weights),
    )


def predict_decode(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    batch = _column(rows, "batch_size")
    # `step` is the KV-cache length each sequence reads.
    return decode_attention_seconds(
        batch, batch * _column(rows, "step"), q_heads=_column(rows, "num_heads"),
        kv_heads=_column(rows, "num_key_value_heads"), head_dim=_column(rows, "head_dim"),
        kv_bytes=_BF16_BYTES, memory_bw=gpu.memory_bandwidth_bytes_per_s,
        sm_count=gpu.parallel_units, eff=eff,
    )


def predict_prefill(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    # `batch_size` whole prompts of `isl` tokens each, nothing cached.
    batch, prompt = _column(rows, "batch_size"), _column(rows, "isl")
    zero = np.zeros(len(rows))
    flops, head_tokens, traffic = prefill_attention_shape(
        batch * prompt, zero, zero, batch * prompt * prompt,
        q_heads=_column(rows, "num_heads"), kv_heads=_column(rows, "num_key_value_heads"),
        head_dim=_column(rows, "head_dim"), kv_bytes=_BF16_BYTES,
    )
    return prefill_attention_seconds(
        flops, head_tokens, traffic,
        peak_flops=gpu.peak_flops.bf16, memory_bw=gpu.memory_bandwidth_bytes_per_s, eff=eff,
    )


def predict_allreduce(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return allreduce_seconds(
        allreduce_message_bytes(rows), _column(rows, "num_gpus"),
        link_bw=gpu.intra_node_bandwidth_bytes_per_s, eff=eff,
    )


def predict_moe(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return _moe_with_weights(rows, gpu, eff, "bf16")


def predict_moe_fp8(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return _moe_with_weights(rows, gpu, eff, "fp8")


def predict_moe_fp4(rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency) -> np.ndarray:
    return _moe_with_weights(rows, gpu, eff, "nvfp4")


def predict_moe_mxfp4(rows: pd.DataFrame, gpu: GpuProfile,
                      eff: RooflineEfficiency) -> np.ndarray:
    return _moe_with_weights(rows, gpu, eff, "mxfp4")


def _moe_with_weights(
    rows: pd.DataFrame, gpu: GpuProfile, eff: RooflineEfficiency, weights: str
) -> np.ndarray:
    """One fused-MoE call as the cost model prices a layer's routed experts, on the load the
    benchmark gave it (`benchmark_expert_load`): with the MoE keys the cost model picks for
    `weights` (`PeakFlops.gemm_keys_for`: FP4 weights without keys of their own borrow)."""
    tp, ep = _column(rows, "moe_tp_size"), _column(rows, "moe_ep_size")
    shape = ExpertShape(
        num_experts=_column(rows, "num_experts"), top_k=_column(rows, "topk"),
        expert_parallel=ep, hidden=_column(rows, "hidden_size"),
        width=np.ceil(_column(rows, "inter_size") / tp),
    )
    seconds, _, _ = routed_expert_parts(
        benchmark_expert_load(_column(rows, "num_tokens"), shape), shape,
        peak_flops=gpu.peak_flops.for_weights(weights), memory_bw=gpu.memory_bandwidth_bytes_per_s,
        weight_bytes=bytes_per_element(weights), sm_count=gpu.parallel_units,
        eff=eff.for_moe(gpu.peak_flops.gemm_keys_for(weights, eff.moe_by_weights)),
    )
    return np.asarray(seconds)


def benchmark_expert_load(tokens: np.ndarray, shape: ExpertShape) -> ExpertLoad:
    """The load of aiconfigurator's balanced routing: each of T tokens picks k experts
    round-robin over all E, so min(E, T·k) of them are touched, an EP-th of those and of the
    T·k pairs on the measured GPU, which routes all T·k picks (its kernel masks the rest).
    Random routing, which the simulator assumes, touches fewer experts at small T."""
    picks = tokens * shape.top_k
    ep = shape.expert_parallel
    return ExpertLoad(np.minimum(shape.num_experts, picks) / ep, picks / ep, picks)


PREDICTORS: dict[str, Predictor] = {
    "gemm": predict_gemm,
    "decode_attention": predict_decode,
    "prefill_attention": predict_prefill,
    "allreduce": predict_allreduce,
    "gemm_fp8": predict_gemm_fp8,
    "moe": predict_moe,
    "moe_fp8": predict_moe_fp8,
    "gemm_fp4": predict_gemm_fp4,
    "moe_fp4": predict_moe_fp4,
    "moe_mxfp4": predict_moe_mxfp4,
}
