"""The roofline cost of one engine step (DESIGN §3), cheap enough to call every simulated step.

Each GEMM costs the larger of its compute time and its memory time: with few tokens the
weights streaming from HBM dominate (why batching decode is nearly free), with many tokens the
FLOPs do (why prefill is expensive). Attention adds prefill FLOPs and decode KV reads; tensor
parallelism adds two all-reduces per layer; every step pays a fixed and a per-sequence overhead.

All shapes are per GPU: tensor parallelism splits N of the QKV and gate/up projections and K of
the output and down projections (Megatron-style), and the LM head by vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from sim.dtypes import ACTIVATION_BYTES, bytes_per_element, check_kv_dtype, check_weight_dtype
from sim.hardware import GpuProfile
from sim.model_spec import ModelSpec

# The caches hold one entry per distinct token count; a long run with chunked prefill sees at
# most a few thousand, so the bound only guards against pathological inputs.
_MAX_CACHE_ENTRIES = 100_000

_FloatOrArray = TypeVar("_FloatOrArray", float, np.ndarray)


@dataclass(frozen=True, slots=True)
class StepCost:
    """Duration of one step and where it went; the four parts sum to `seconds`."""

    seconds: float
    linear_s: float  # QKV/O/MLP GEMMs of every layer, plus the LM head
    attention_s: float
    communication_s: float  # tensor-parallel all-reduces
    overhead_s: float  # c0 + c1 * num_seqs
    compute_bound_linear: bool  # the layer GEMMs' FLOP time exceeded their memory time


class RooflineCostModel:
    """Step and swap times of one replica: `model` on `tensor_parallel` GPUs of kind `gpu`."""

    __slots__ = (
        "_allreduce_fixed_s",
        "_allreduce_per_token_s",
        "_attention_flops_per_work",
        "_attention_flops_rate",
        "_kv_read_rate",
        "_layer_cache",
        "_layer_gemms",
        "_lm_head_cache",
        "_lm_head_gemm",
        "_per_seq_overhead_s",
        "_step_overhead_s",
        "gpu",
        "kv_bytes_per_token_per_gpu",
        "kv_dtype",
        "model",
        "tensor_parallel",
        "weight_dtype",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuProfile,
        *,
        tensor_parallel: int,
        weight_dtype: str,
        kv_dtype: str,
    ) -> None:
        check_weight_dtype(weight_dtype)
        check_kv_dtype(kv_dtype)
        model.check_tensor_parallel(tensor_parallel)
        self.model = model
        self.gpu = gpu
        self.tensor_parallel = tp = tensor_parallel
        self.weight_dtype = weight_dtype
        self.kv_dtype = kv_dtype
        eff = gpu.efficiency
        h, d, layers = model.hidden_size, model.head_dim, model.num_layers
        q_heads = model.num_heads // tp
        kv_heads = model.kv_heads_per_gpu(tp)
        mlp_width = math.ceil(model.intermediate_size / tp)

        self._layer_gemms = _GemmGroup(
            shapes=(
                ((q_heads + 2 * kv_heads) * d, h),  # fused QKV, column-parallel
                (h, q_heads * d),  # attention output, row-parallel
                (2 * mlp_width, h),  # fused gate/up, column-parallel
                (h, mlp_width),  # down, row-parallel
            ),
            repeats=layers,
            peak_flops=gpu.peak_flops.for_weights(weight_dtype),
            weight_bytes=bytes_per_element(weight_dtype),
            gpu=gpu,
        )
        # The LM head stays bf16 in quantised checkpoints, so it streams and computes as bf16.
        self._lm_head_gemm = _GemmGroup(
            shapes=((math.ceil(model.vocab_size / tp), h),),
            repeats=1,
            peak_flops=gpu.peak_flops.bf16,
            weight_bytes=ACTIVATION_BYTES,
            gpu=gpu,
        )
        self._layer_cache: dict[int, tuple[float, float, bool]] = {}
        self._lm_head_cache: dict[int, float] = {}

        self._attention_flops_per_work = 4.0 * d * q_heads * layers
        self._attention_flops_rate = gpu.peak_flops.bf16 * eff.attention_compute_efficiency
        self.kv_bytes_per_token_per_gpu = 2.0 * layers * kv_heads * d * bytes_per_element(kv_dtype)
        self._kv_read_rate = gpu.memory_bandwidth_bytes_per_s * eff.kv_read_efficiency

        if tp > 1:
            # Two ring all-reduces per layer (after attention and after the MLP).
            ring_bytes_per_token = 2.0 * (tp - 1) / tp * h * ACTIVATION_BYTES
            self._allreduce_fixed_s = 2 * layers * eff.allreduce_latency_s
            self._allreduce_per_token_s = (
                2 * layers * ring_bytes_per_token / gpu.intra_node_bandwidth_bytes_per_s
            )
        else:
            self._allreduce_fixed_s = 0.0
            self._allreduce_per_token_s = 0.0
        self._step_overhead_s = eff.step_overhead_s
        self._per_seq_overhead_s = eff.per_seq_overhead_s

    def step_time(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int
    ) -> StepCost:
        """Cost of one step.

        `new_tokens[i]` (>= 1) tokens are computed for sequence i on top of the
        `context_tokens[i]` already in its KV cache; `num_emitting` sequences run the LM head.
        """
        num_seqs = new_tokens.shape[0]
        if num_seqs == 0:
            raise ValueError("step_time of an empty step: a step needs at least one sequence")
        if context_tokens.shape != new_tokens.shape:
            raise ValueError(
                f"new_tokens has shape {new_tokens.shape} but context_tokens {context_tokens.shape}"
            )
        total_new = int(new_tokens.sum())
        if total_new <= 0:
            raise ValueError("step_time of a step with no new tokens")

        layers = self._layer_cache.get(total_new)
        if layers is None:
            layers = self._layer_cost(total_new)
        linear_s, communication_s, compute_bound = layers
        if num_emitting > 0:
            lm_head_s = self._lm_head_cache.get(num_emitting)
            if lm_head_s is None:
                lm_head_s = self._lm_head_cost(num_emitting)
            linear_s += lm_head_s

        attention_s = self._attention_s(new_tokens, context_tokens, total_new, num_seqs)
        overhead_s = self._step_overhead_s + self._per_seq_overhead_s * num_seqs
        return StepCost(
            seconds=linear_s + attention_s + communication_s + overhead_s,
            linear_s=linear_s,
            attention_s=attention_s,
            communication_s=communication_s,
            overhead_s=overhead_s,
            compute_bound_linear=compute_bound,
        )

    def swap_time(self, num_tokens: int) -> float:
        """Seconds to copy `num_tokens` tokens of KV one way over PCIe.

        Each GPU moves only its own shard, all GPUs of the replica in parallel.
        """
        if num_tokens <= 0:
            return 0.0
        return (
            self.gpu.p2p_latency_s
            + num_tokens * self.kv_bytes_per_token_per_gpu / self.gpu.pcie_bandwidth_bytes_per_s
        )

    def _attention_s(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, total_new: int, num_seqs: int
    ) -> float:
        is_prefill = new_tokens > 1
        if not is_prefill.any():
            if total_new == num_seqs:  # the common pure-decode step: every q_i == 1
                decode_kv_tokens = float(context_tokens.sum()) + num_seqs
            else:
                decode_kv_tokens = self._decode_kv_tokens(new_tokens, context_tokens)
            return self._decode_attention_s(decode_kv_tokens)

        prefill_new = new_tokens[is_prefill]
        prefill_context = context_tokens[is_prefill]
        # Σ q_i (c_i + q_i / 2): each new token attends to the cached tokens and, causally,
        # to half of the new ones.
        work = float(np.dot(prefill_new, prefill_context + 0.5 * prefill_new))
        compute_s = work * self._attention_flops_per_work / self._attention_flops_rate
        # Short chunks on long contexts are bound by reading the KV cache, not by FLOPs.
        prefill_kv_tokens = float(prefill_context.sum()) + float(prefill_new.sum())
        read_s = prefill_kv_tokens * self.kv_bytes_per_token_per_gpu / self._kv_read_rate
        decode_s = (
            self._decode_kv_tokens(new_tokens, context_tokens)
            * self.kv_bytes_per_token_per_gpu
            / self._kv_read_rate
        )
        return max(compute_s, read_s) + decode_s

    def decode_step_seconds(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        num_steps: int,
    ) -> np.ndarray:
        """Durations of `num_steps` consecutive decode steps of one unchanged batch.

        Step j is the step `step_time` would cost with every context grown by j: the linear
        layers, communication and overhead are the same each step, and only the KV read grows.
        Computed with the same operations in the same order as `step_time`, so each element
        equals `step_time(...).seconds` exactly — the fast path's results depend on that.
        """
        if not (new_tokens == 1).all():
            raise ValueError("decode_step_seconds needs a decode-only batch (one token each)")
        first = self.step_time(new_tokens, context_tokens, num_emitting)
        num_seqs = new_tokens.shape[0]
        kv_tokens = (
            float(context_tokens.sum()) + num_seqs * np.arange(num_steps, dtype=np.float64)
        ) + num_seqs
        attention_s = self._decode_attention_s(kv_tokens)
        return ((first.linear_s + attention_s) + first.communication_s) + first.overhead_s

    def _decode_attention_s(self, kv_tokens: _FloatOrArray) -> _FloatOrArray:
        """Time to read `kv_tokens` cached tokens' K and V (scalar or one per step)."""
        return kv_tokens * self.kv_bytes_per_token_per_gpu / self._kv_read_rate

    @staticmethod
    def _decode_kv_tokens(new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        """Σ (c_i + 1) over the decode sequences (q_i == 1)."""
        is_decode = new_tokens == 1
        return float(np.dot(is_decode, context_tokens)) + float(np.count_nonzero(is_decode))

    def _layer_cost(self, total_new: int) -> tuple[float, float, bool]:
        linear_s, compute_bound = self._layer_gemms.cost(total_new)
        communication_s = self._allreduce_fixed_s + self._allreduce_per_token_s * total_new
        result = (linear_s, communication_s, compute_bound)
        if len(self._layer_cache) >= _MAX_CACHE_ENTRIES:
            self._layer_cache.clear()
        self._layer_cache[total_new] = result
        return result

    def _lm_head_cost(self, num_emitting: int) -> float:
        lm_head_s, _ = self._lm_head_gemm.cost(num_emitting)
        if len(self._lm_head_cache) >= _MAX_CACHE_ENTRIES:
            self._lm_head_cache.clear()
        self._lm_head_cache[num_emitting] = lm_head_s
        return lm_head_s


class _GemmGroup:
    """GEMMs of fixed (N, K) shapes run `repeats` times with the same token count M."""

    __slots__ = (
        "_efficiency",
        "_launch_s",
        "_memory_rate",
        "_peak_flops",
        "_repeats",
        "_shapes",
        "_weight_bytes",
    )

    def __init__(
        self,
        *,
        shapes: tuple[tuple[int, int], ...],
        repeats: int,
        peak_flops: float,
        weight_bytes: float,
        gpu: GpuProfile,
    ) -> None:
        self._shapes = shapes
        self._repeats = repeats
        self._peak_flops = peak_flops
        self._weight_bytes = weight_bytes
        self._efficiency = gpu.efficiency
        self._memory_rate = gpu.memory_bandwidth_bytes_per_s * gpu.efficiency.memory_efficiency
        self._launch_s = gpu.efficiency.kernel_launch_s

    def cost(self, num_tokens: int) -> tuple[float, bool]:
        """(seconds for all repeats, whether FLOP time exceeded memory time overall)."""
        m = num_tokens
        flops_rate = self._peak_flops * self._efficiency.gemm_efficiency(m)
        seconds = compute_total = memory_total = 0.0
        for n, k in self._shapes:
            compute_s = 2.0 * m * n * k / flops_rate
            # Weights stream once; activations go in (M x K) and out (M x N).
            memory_s = (n * k * self._weight_bytes + m * (n + k) * ACTIVATION_BYTES) / (
                self._memory_rate
            )
            seconds += max(compute_s, memory_s) + self._launch_s
            compute_total += compute_s
            memory_total += memory_s
        return seconds * self._repeats, compute_total > memory_total
