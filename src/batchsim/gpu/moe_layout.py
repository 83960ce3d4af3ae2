"""Where a mixture-of-experts or MLA model's weights and KV cache sit on a stage's GPUs.

Three degrees describe the layout of one stage of `tensor_parallel` GPUs:
- tensor parallelism splits attention heads, dense MLPs, shared experts and the vocabulary;
- `expert_parallel` GPUs each hold E / EP whole routed experts, each of them split by tensor
  parallelism over the remaining TP / EP GPUs (EP = 1: every expert is split over all TP GPUs);
- `data_parallel_attention` runs everything but the routed experts data-parallel instead:
  each GPU holds the full attention (and embedding, LM head, dense MLP, shared-expert) weights
  and serves its own share of the sequences, keeping their whole KV — vLLM's layout with
  `--data-parallel-size` and `--enable-expert-parallel`. It requires EP = TP (every GPU
  holds whole experts), so tokens reach their experts by all-to-all (`batchsim.gpu.moe_cost`).

MLA's single latent cannot be split by heads: under tensor parallelism every GPU keeps the
whole latent of every token (vLLM), so only data-parallel attention divides MLA's KV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchsim.gpu.dtypes import ACTIVATION_BYTES, bytes_per_element
from batchsim.gpu.model_spec import ModelError, ModelSpec
from batchsim.gpu.pipeline_stages import stage_model


@dataclass(frozen=True, slots=True)
class Parallelism:
    """How one stage's `tensor_parallel` GPUs share a model."""

    tensor_parallel: int
    expert_parallel: int = 1
    data_parallel_attention: bool = False

    @property
    def attention_split(self) -> int:
        """GPUs each attention (and other non-expert) weight is split over: 1 under DP."""
        return 1 if self.data_parallel_attention else self.tensor_parallel

    @property
    def expert_tensor_parallel(self) -> int:
        """GPUs each routed expert is split over."""
        return self.tensor_parallel // self.expert_parallel


def check_parallelism(model: ModelSpec, layout: Parallelism) -> None:
    """Raise ModelError, naming the degree, unless `model` can be laid out as `layout`."""
    tp, ep = layout.tensor_parallel, layout.expert_parallel
    if ep < 1:
        raise ModelError(f"expert_parallel must be a positive integer, got {ep}")
    if model.moe is None and ep > 1:
        raise ModelError(f"expert_parallel={ep} needs a mixture-of-experts model; {model.name} "
                         "is dense (use tensor_parallel or replicas)")
    if model.moe is None and layout.data_parallel_attention:
        raise ModelError(f"data_parallel_attention needs a mixture-of-experts model; "
                         f"{model.name} is dense (use replicas for data parallelism)")
    if not layout.data_parallel_attention:
        model.check_tensor_parallel(tp)
    elif tp < 1:
        raise ModelError(f"tensor_parallel must be a positive integer, got {tp}")
    if model.moe is None:
        return
    experts = model.moe.num_experts
    if tp % ep:
        raise ModelError(f"expert_parallel={ep} must divide tensor_parallel={tp} (the experts "
                         "are spread over the stage's GPUs)")
    if experts % ep:
        raise ModelError(f"{model.name} has {experts} routed experts, which "
                         f"expert_parallel={ep} does not divide")
    if layout.data_parallel_attention and ep != tp:
        raise ModelError(f"data_parallel_attention needs expert_parallel equal to "
                         f"tensor_parallel ({tp}), got {ep}: each GPU must hold whole experts")


def weights_bytes_per_gpu(
    model: ModelSpec, layout: Parallelism, weight_dtype: str, pipeline_parallel: int = 1,
    expert_dtype: str | None = None,
) -> int:
    """Bytes of weights one GPU holds (total parameters, laid out as `layout` says).

    Transformer-layer matrices are in `weight_dtype`, the routed experts in `expert_dtype`
    (default: the same); the embedding and LM head stay bf16 and
    are split by vocabulary (replicated under data-parallel attention); norms are replicated.
    Under pipeline parallelism, the last stage's GPUs (the fullest, as `batchsim.gpu.memory` says):
    their share of the layers and the LM head.
    """
    model = stage_model(model, pipeline_parallel)
    h, split = model.hidden_size, layout.attention_split
    per_layer = _attention_params_per_gpu(model, split)
    linear = model.num_linear_layers
    quantised = (model.num_layers - linear) * per_layer
    if linear and model.layer_kinds is not None and model.layer_kinds.linear_spec is not None:
        # Linear-attention layers are split by heads like attention (vLLM shards them by TP).
        quantised += linear * model.layer_kinds.linear_spec.params(h) / split
    quantised += model.num_dense_layers * 3 * h * math.ceil(model.intermediate_size / split)
    moe = model.moe
    experts = 0.0  # routed experts stored in a format of their own
    if moe is not None:
        shared = 3 * h * math.ceil(moe.shared_width() / split)
        expert_width = math.ceil(moe.expert_intermediate_size / layout.expert_tensor_parallel)
        routed = moe.num_experts // layout.expert_parallel * 3 * h * expert_width
        if expert_dtype is not None and expert_dtype != weight_dtype:
            experts = model.num_moe_layers * routed * bytes_per_element(expert_dtype)
            routed = 0
        quantised += model.num_moe_layers * (h * moe.num_experts + shared + routed)
    vocab_rows = math.ceil(model.vocab_size / split) * h
    both_ends = pipeline_parallel == 1 and not model.tie_word_embeddings
    embeddings = 2 * vocab_rows if both_ends else vocab_rows
    norms = (2 * model.num_layers + 1) * h
    return round(quantised * bytes_per_element(weight_dtype) + experts
                 + (embeddings + norms) * ACTIVATION_BYTES)


def _attention_params_per_gpu(model: ModelSpec, split: int) -> float:
    mla = model.mla
    if mla is not None:
        replicated = mla.replicated_params(model.hidden_size)
        by_heads = mla.params(model.hidden_size, model.num_heads) - replicated
        return replicated + by_heads / split
    h, d = model.hidden_size, model.head_dim
    q_heads = model.num_heads // split
    kv_heads = model.kv_heads_per_gpu(split)
    return h * (q_heads + 2 * kv_heads) * d + q_heads * d * h


def kv_bytes_per_token_per_gpu(model: ModelSpec, layout: Parallelism, kv_dtype: str) -> float:
    """KV bytes one cached token of the replica costs each GPU of the stage, on average.

    Tensor-parallel attention: each GPU holds its heads' share (MLA: the whole latent, since
    all heads read it). Data-parallel attention: a GPU holds the whole KV of its own sequences,
    a 1/TP share of the replica's tokens.
    """
    element = bytes_per_element(kv_dtype)
    tp = layout.tensor_parallel
    if layout.data_parallel_attention:
        return model.kv_bytes_per_token(element) / tp
    if model.mla is not None:
        return model.kv_bytes_per_token(element)
    return 2.0 * model.num_full_attention_layers * model.kv_heads_per_gpu(tp) * model.head_dim \
        * element


def bounded_bytes_per_sequence_per_gpu(model: ModelSpec, layout: Parallelism,
                                       kv_dtype: str) -> float:
    """Cache bytes one long sequence holds on each GPU beyond its full-attention KV: the
    sliding-window layers' KV of `window` tokens and the linear layers' state, which stop
    growing (docs/design.md §2, hybrid models). Split like the KV: by heads under tensor
    parallelism, whole under data-parallel attention (over TP, as `kv_bytes_per_token_per_gpu`)."""
    kinds = model.layer_kinds
    if kinds is None or not kinds.is_hybrid:
        return 0.0
    element = bytes_per_element(kv_dtype)
    tp = layout.tensor_parallel
    if layout.data_parallel_attention:
        windowed = model.windowed_kv_bytes_per_token(element) / tp
        return windowed * kinds.window + model.state_bytes_per_sequence() / tp
    windowed = 2.0 * kinds.sliding * model.kv_heads_per_gpu(tp) * model.head_dim * element
    return windowed * kinds.window + model.state_bytes_per_sequence() / tp


__all__ = ["Parallelism", "bounded_bytes_per_sequence_per_gpu", "check_parallelism",
           "kv_bytes_per_token_per_gpu",
           "weights_bytes_per_gpu"]
