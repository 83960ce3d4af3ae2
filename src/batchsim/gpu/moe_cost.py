"""Roofline cost of the layers of a mixture-of-experts or MLA model, or of data-parallel attention.

`gpu.cost_model.RooflineCostModel` prices a dense model's layers itself and hands the rest to
this module: `LayerStackCost` (every layer's GEMMs and the stage's communication at a step's
token count) and `attention_shape` (what the attention kernel reads). Every GEMM goes through
`gpu.roofline.gemm_seconds`, the function the calibration fit scores; no efficiency constant is
added here. The all-to-all uses only the profile's link bandwidth and p2p latency (and, for a
group beyond one NVLink domain, its network: `gpu.network`, which also prices the all-reduces).

Routed experts are priced on the busiest GPU of the stage (every GPU waits for it: the step is
bounded by it) by `gpu.moe_experts.routed_expert_parts`, the function the calibration fit
scores on the fused-MoE kernel tables, with the profile's fused-MoE keys for the experts'
weight format (`RooflineEfficiency.for_moe`), which may differ from the other layers'. That
GPU's experts are picked `imbalance` times as often as the mean when EP > 1 (under pure TP
every GPU holds a slice of every expert, so routing skew makes no straggler and `imbalance` has
no effect).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchsim.gpu.dtypes import ACTIVATION_BYTES, bytes_per_element
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.model_spec import ModelSpec
from batchsim.gpu.moe_experts import ExpertLoad, ExpertShape, expert_load, routed_expert_parts
from batchsim.gpu.moe_layout import Parallelism
from batchsim.gpu.network import cross_domain_alltoall_seconds, group_allreduce_seconds, group_span
from batchsim.gpu.roofline import gemm_parts, gemm_seconds

Shapes = tuple[tuple[float, float], ...]  # (N, K) of GEMMs that all see the same M


def alltoall_seconds(
    message_bytes: np.ndarray | float, num_gpus: float, *, link_bw: float, latency_s: float
) -> np.ndarray | float:
    """One all-to-all in which each GPU sends `message_bytes` (its whole send buffer, its own
    share included) spread evenly over `num_gpus` GPUs.

    Every GPU sends and receives (t−1)/t of its buffer at once over its own link (an NVSwitch
    node is non-blocking), after one p2p latency. Spec bandwidth, no fitted efficiency: against
    NCCL's measured all-to-all it is optimistic for large messages (NCCL reaches about 0.7 of
    NVLink per direction; see docs/how-to/moe.md for the measured error).
    """
    return latency_s + (num_gpus - 1.0) / num_gpus * message_bytes / link_bw


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """What one layer's attention kernel computes and reads on one GPU.

    Prefill and decode shapes differ for MLA; `decode_flops_per_kv_token` is MLA's absorbed
    decode compute (zero for grouped-query attention, whose decode is memory-bound).
    """

    prefill_q_heads: float
    prefill_kv_heads: float
    prefill_head_dim: float
    decode_q_heads: float
    decode_kv_heads: float
    decode_head_dim: float
    decode_flops_per_kv_token: float
    data_parallel_ranks: int  # GPUs that split the sequences (1: tensor-parallel attention)

    def local_share(self, num_seqs: float) -> float:
        """Fraction of a step's sequences the busiest data-parallel rank serves.

        Sequences spread evenly over the ranks, but a rank holds at least one of them.
        """
        if self.data_parallel_ranks == 1:
            return 1.0
        return max(1.0 / self.data_parallel_ranks, 1.0 / num_seqs)


def attention_shape(model: ModelSpec, layout: Parallelism) -> AttentionShape:
    """Attention kernel shapes per GPU.

    MLA in decode is modelled in its weight-absorbed form (FlashMLA, vLLM's MLA backends):
    W_UK is folded into the query and W_UV into the output, so each head attends directly over
    the cached latent — one shared "KV head" of kv_lora_rank + rope elements read once per token
    (K and V are the same latent), 2·(kv_lora + rope) + 2·kv_lora FLOPs per head and cached
    token. Passed to the decode formula as one KV head of half that width, whose K + V bytes
    are the latent's. In prefill vLLM does not absorb: the latent is expanded to per-head K
    (nope + rope) and V (v_head_dim) and ordinary attention runs with as many KV heads as query
    heads; its QKᵀ and PV FLOPs are those of a head width of (qk + v) / 2.
    """
    split = layout.attention_split
    ranks = layout.tensor_parallel if layout.data_parallel_attention else 1
    q_heads = model.num_heads / split
    mla = model.mla
    if mla is None:
        kv_heads = float(model.kv_heads_per_gpu(split))
        d = float(model.head_dim)
        return AttentionShape(q_heads, kv_heads, d, q_heads, kv_heads, d, 0.0, ranks)
    prefill_dim = (mla.qk_head_dim + mla.v_head_dim) / 2.0
    absorbed_flops = q_heads * (2.0 * mla.latent_dim + 2.0 * mla.kv_lora_rank)
    return AttentionShape(q_heads, q_heads, prefill_dim, q_heads, 1.0, mla.latent_dim / 2.0,
                          absorbed_flops, ranks)


class LayerStackCost:
    """Linear layers and communication of all layers of one stage, per step."""

    __slots__ = (
        "_allreduce_count",
        "_alltoall_count",
        "_attention_shapes",
        "_dense_mlp_shapes",
        "_efficiency",
        "_expert_bytes",
        "_expert_efficiency",
        "_expert_peak_flops",
        "_expert_shape",
        "_gpu",
        "_hidden",
        "_imbalance",
        "_layout",
        "_model",
        "_moe_local_shapes",
        "_num_attention_layers",
        "_num_dense_layers",
        "_num_moe_layers",
        "_peak_flops",
        "_weight_bytes",
    )

    def __init__(
        self, model: ModelSpec, gpu: GpuProfile, layout: Parallelism, *, weight_dtype: str,
        imbalance: float, expert_dtype: str | None = None,
    ) -> None:
        """`expert_dtype`: the routed experts' weight format (default `weight_dtype`), as
        checkpoints that quantise only their experts (gpt-oss: MXFP4 experts, bf16 rest)."""
        if imbalance < 1.0:
            raise ValueError(f"moe_imbalance must be >= 1, got {imbalance}")
        self._model, self._gpu, self._layout = model, gpu, layout
        self._hidden = float(model.hidden_size)
        self._peak_flops = gpu.peak_flops.for_weights(weight_dtype)
        self._weight_bytes = bytes_per_element(weight_dtype)
        # Every GEMM here holds the checkpoint's weights; the routed experts run the fused-MoE
        # kernel, whose keys are its own where the profile has them.
        # FP4 borrows another dtype's keys where it has none of its own (a profile without
        # fitted FP4 fused-MoE tables runs its experts with fp8's MoE keys on FP4 cores).
        eff, flops = gpu.efficiency, gpu.peak_flops
        self._efficiency = eff.for_weights(flops.gemm_keys_for(weight_dtype, eff.gemm_by_weights))
        experts = expert_dtype or weight_dtype
        self._expert_peak_flops = flops.for_weights(experts)
        self._expert_bytes = bytes_per_element(experts)
        self._expert_efficiency = eff.for_moe(flops.gemm_keys_for(experts, eff.moe_by_weights))
        # Under pure tensor parallelism every GPU holds a slice of every expert: no straggler.
        self._imbalance = imbalance if layout.expert_parallel > 1 else 1.0
        split = layout.attention_split
        h = model.hidden_size
        self._attention_shapes = _attention_gemms(model, split)
        self._num_attention_layers = float(model.num_layers)
        dense_width = math.ceil(model.intermediate_size / split)
        self._dense_mlp_shapes: Shapes = ((2.0 * dense_width, h), (h, dense_width))
        self._num_dense_layers = float(model.num_dense_layers)
        self._num_moe_layers = float(model.num_moe_layers)
        moe = model.moe
        self._moe_local_shapes: Shapes = ()
        self._expert_shape: ExpertShape | None = None
        if moe is not None:
            shared = math.ceil(moe.shared_width() / split)
            router: Shapes = ((float(moe.num_experts), h),)
            self._moe_local_shapes = router + (
                ((2.0 * shared, h), (h, shared)) if shared else ())
            self._expert_shape = ExpertShape(
                num_experts=float(moe.num_experts), top_k=float(moe.experts_per_token),
                expert_parallel=float(layout.expert_parallel), hidden=self._hidden,
                width=float(math.ceil(moe.expert_intermediate_size
                                      / layout.expert_tensor_parallel)))
        # Tensor-parallel attention: two all-reduces a layer (after attention, after the MLP
        # or MoE block, which also sums the experts' partial outputs). Data-parallel attention:
        # none, but each MoE layer dispatches its tokens to their experts and combines them.
        tp = layout.tensor_parallel
        tensor_parallel = tp > 1 and not layout.data_parallel_attention
        self._allreduce_count = 2.0 * model.num_layers if tensor_parallel else 0.0
        data_parallel = tp > 1 and layout.data_parallel_attention
        self._alltoall_count = 2.0 * model.num_moe_layers if data_parallel else 0.0

    def cost_many(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(linear seconds, communication seconds, compute-bound?) at each step token count."""
        tokens = tokens.astype(np.float64)
        local = self.local_tokens(tokens)
        parts = [
            self._gemms(local, self._attention_shapes, self._num_attention_layers),
            self._gemms(local, self._dense_mlp_shapes, self._num_dense_layers),
        ]
        if self._model.moe is not None:
            parts.append(self._gemms(local, self._moe_local_shapes, self._num_moe_layers))
            parts.append(self._routed_experts(tokens))
        seconds, compute, memory = (np.sum([part[i] for part in parts], axis=0)
                                    for i in range(3))
        return seconds, self._communication(tokens, local), np.asarray(compute > memory)

    def local_tokens(self, tokens: np.ndarray) -> np.ndarray:
        """Tokens one GPU runs through the non-expert layers: all of them under tensor-parallel
        attention; under data-parallel attention its share (at least one), the ranks' loads
        assumed balanced."""
        if not self._layout.data_parallel_attention:
            return tokens
        return np.maximum(tokens / self._layout.tensor_parallel, 1.0)

    def expert_load(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(distinct experts touched, tokens per touched expert) on the busiest GPU."""
        load = self._load(tokens)
        return load.touched, load.tokens_per_expert

    def _load(self, tokens: np.ndarray) -> ExpertLoad:
        # Under data-parallel attention an all-to-all brings each GPU only its own pairs.
        assert self._expert_shape is not None
        return expert_load(tokens, self._expert_shape, self._imbalance,
                           dispatched=self._layout.data_parallel_attention)

    def mla_context_expansion_s(self, context_tokens: float) -> float:
        """One layer's up-projection of cached latents for a chunked prefill (0 without MLA).

        Prefill attention is not absorbed (`attention_shape`), so a prefill chunk attending to
        `context_tokens` already cached expands their latents to per-head K and V again
        (kv_b: kv_lora_rank → heads × (nope + v)), as vLLM's MLA prefill does per chunk.
        """
        mla = self._model.mla
        if mla is None or context_tokens <= 0:
            return 0.0
        heads = self._model.num_heads / self._layout.attention_split
        width = heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        seconds, _, _ = self._gemm(np.array([context_tokens]), width, mla.kv_lora_rank)
        return float(seconds[0])

    def _routed_experts(self, tokens: np.ndarray) -> tuple[np.ndarray, ...]:
        shape = self._expert_shape
        assert shape is not None
        gpu = self._gpu
        parts = routed_expert_parts(
            self._load(tokens), shape, peak_flops=self._expert_peak_flops,
            memory_bw=gpu.memory_bandwidth_bytes_per_s, weight_bytes=self._expert_bytes,
            sm_count=gpu.parallel_units, eff=self._expert_efficiency)
        return tuple(self._num_moe_layers * part for part in parts)

    def _gemms(self, m: np.ndarray, shapes: Shapes, repeats: float) -> tuple[np.ndarray, ...]:
        total = [np.zeros_like(m), np.zeros_like(m), np.zeros_like(m)]
        for n, k in shapes:
            for acc, part in zip(total, self._gemm(m, n, k), strict=True):
                acc += part
        return tuple(repeats * acc for acc in total)

    def _gemm(self, m: np.ndarray, n: np.ndarray | float, k: float) -> tuple[np.ndarray, ...]:
        """(seconds, compute seconds, memory seconds) of one GEMM per element of m."""
        gpu = self._gpu
        bw, sms, eff = gpu.memory_bandwidth_bytes_per_s, gpu.parallel_units, self._efficiency
        seconds = gemm_seconds(m, n, k, peak_flops=self._peak_flops, memory_bw=bw,
                               weight_bytes=self._weight_bytes, sm_count=sms, eff=eff)
        compute, memory = gemm_parts(m, n, k, peak_flops=self._peak_flops, memory_bw=bw,
                                     weight_bytes=self._weight_bytes, sm_count=sms, eff=eff)
        return seconds, compute, memory

    def _communication(self, tokens: np.ndarray, local: np.ndarray) -> np.ndarray:
        gpu, tp = self._gpu, float(self._layout.tensor_parallel)
        span = group_span(gpu, self._layout.tensor_parallel)
        seconds = np.zeros_like(tokens)
        if self._allreduce_count:
            seconds += self._allreduce_count * group_allreduce_seconds(
                tokens * self._hidden * ACTIVATION_BYTES, span, gpu=gpu, eff=gpu.efficiency)
        if self._alltoall_count:
            moe = self._model.moe
            assert moe is not None
            # Each GPU sends every local token to each of its k experts (bf16 activations);
            # the busiest GPU receives `imbalance` times the mean, and everyone waits for it.
            sent = self._imbalance * local * moe.experts_per_token * self._hidden
            if span.crosses_domains:  # EP beyond one NVLink domain: gpu/network.py
                seconds += self._alltoall_count * cross_domain_alltoall_seconds(
                    sent * ACTIVATION_BYTES, span, gpu=gpu)
            else:
                seconds += self._alltoall_count * alltoall_seconds(
                    sent * ACTIVATION_BYTES, tp, link_bw=gpu.intra_node_bandwidth_bytes_per_s,
                    latency_s=gpu.p2p_latency_s)
        return seconds


def _attention_gemms(model: ModelSpec, split: int) -> Shapes:
    """Projection GEMMs of one layer's attention on one GPU (heads split `split` ways)."""
    h = float(model.hidden_size)
    mla = model.mla
    if mla is None:
        q_heads = model.num_heads // split
        kv_heads = model.kv_heads_per_gpu(split)
        d = model.head_dim
        return (((q_heads + 2 * kv_heads) * d, h), (h, q_heads * d))
    heads = model.num_heads / split
    if mla.q_lora_rank is None:
        query: Shapes = ((heads * mla.qk_head_dim, h),)
    else:  # the down-projection is replicated on every GPU, the up one split by heads
        query = ((mla.q_lora_rank, h), (heads * mla.qk_head_dim, mla.q_lora_rank))
    return (
        *query,
        (mla.latent_dim, h),  # kv_a: the latent and rotary key, replicated
        # W_UK and W_UV, absorbed: per head (nope → latent) and (latent → v), side by side.
        (heads * mla.kv_lora_rank, mla.qk_nope_head_dim),
        (heads * mla.v_head_dim, mla.kv_lora_rank),
        (h, heads * mla.v_head_dim),  # output
    )


__all__ = ["AttentionShape", "LayerStackCost", "alltoall_seconds", "attention_shape"]
