"""How a GPU's memory divides into weights, runtime reserve and KV-cache blocks (docs/design.md §2).

Everything is per GPU: under tensor parallelism each GPU holds a shard of the weights and of
every token's KV heads, and the KV pool has the same number of blocks on each GPU. Under
pipeline parallelism each GPU holds only its stage's layers (weights and KV); every stage must
hold every cached token's KV for its layers, so the pool is sized by the stage with the least
room: the last, which holds the LM head and the final norm as well as its layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchsim.gpu.dtypes import (
    ACTIVATION_BYTES,
    bytes_per_element,
    check_expert_dtype,
    check_weight_dtype,
)
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.model_spec import ModelSpec
from batchsim.gpu.moe_layout import (
    Parallelism,
    bounded_bytes_per_sequence_per_gpu,
    check_parallelism,
    kv_bytes_per_token_per_gpu,
)
from batchsim.gpu.moe_layout import weights_bytes_per_gpu as layout_weights_bytes_per_gpu
from batchsim.gpu.network import span_problem
from batchsim.gpu.pipeline_stages import layers_per_stage, stage_model

_GB = 1e9  # messages use decimal GB, like spec sheets and vLLM's logs


class ModelDoesNotFitError(ValueError):
    """The deployment cannot hold the model: the weights (plus the runtime reserve) leave no
    room for even one KV block, or the tensor parallelism is wider than one node."""


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """The per-GPU memory budget of one replica and the KV-block pool it leaves."""

    model_name: str
    gpu_name: str
    tensor_parallel: int
    weight_dtype: str
    kv_dtype: str
    gpu_memory_utilization: float
    block_size: int  # tokens per KV block
    usable_bytes_per_gpu: float  # GPU memory x gpu_memory_utilization
    weights_bytes_per_gpu: int
    reserve_bytes: int
    kv_bytes_per_token_per_gpu: float
    block_bytes: float
    num_blocks: int
    pipeline_parallel: int = 1  # stages; the byte counts above are the fullest stage's GPUs
    expert_parallel: int = 1
    data_parallel_attention: bool = False
    # Hybrid models: blocks each sequence holds besides its full-attention blocks, for its
    # sliding-window KV (a whole window) and linear-attention state (docs/design.md §2).
    sequence_blocks: int = 0
    expert_dtype: str | None = None  # the routed experts' format, where not `weight_dtype`

    @property
    def kv_cache_bytes_per_gpu(self) -> float:
        return self.num_blocks * self.block_bytes

    @property
    def max_cached_tokens(self) -> int:
        """Tokens the KV pool holds when every block is full."""
        return self.num_blocks * self.block_size

    def describe(self, kv_blocks: int | None = None) -> str:
        """One line for logs and reports; `kv_blocks` is a pool size given in place of what
        memory leaves (a set `kv_cache.num_blocks`), which the line then states as the pool."""
        head = (
            f"{self.model_name} ({self.formats()} weights, {self.kv_dtype} KV) on "
            f"{self._gpus()} {self.gpu_name}{self._layout_note()}: per GPU "
            f"{self.usable_bytes_per_gpu / _GB:.1f} GB usable = "
            f"{self.weights_bytes_per_gpu / _GB:.1f} GB weights + "
            f"{self.reserve_bytes / _GB:.1f} GB reserve + {self.kv_cache_bytes_per_gpu / _GB:.1f}"
        )
        if kv_blocks is None or kv_blocks == self.num_blocks:
            return (f"{head} GB KV cache ({self.num_blocks:,} blocks of {self.block_size} tokens"
                    f" = {self.max_cached_tokens:,} tokens)")
        return (f"{head} GB left for KV ({self.num_blocks:,} blocks would fit); KV cache set to "
                f"{kv_blocks:,} blocks of {self.block_size} tokens = "
                f"{kv_blocks * self.block_size:,} tokens ({kv_blocks * self.block_bytes / _GB:.1f}"
                " GB)")

    def formats(self) -> str:
        """The weights' format: "fp8", or "bf16 (mxfp4 experts)" where the experts differ."""
        if self.expert_dtype is None:
            return self.weight_dtype
        return f"{self.weight_dtype} ({self.expert_dtype} experts)"

    def _gpus(self) -> str:
        """"4x", or "8x (TP4 x PP2, last stage)" for a pipelined replica."""
        if self.pipeline_parallel == 1:
            return f"{self.tensor_parallel}x"
        return (f"{self.tensor_parallel * self.pipeline_parallel}x (TP{self.tensor_parallel} x "
                f"PP{self.pipeline_parallel}, last stage)")


    def _layout_note(self) -> str:
        """" (EP 8, data-parallel attention)" when the stage shares a MoE model that way."""
        notes = [f"EP {self.expert_parallel}"] if self.expert_parallel > 1 else []
        if self.data_parallel_attention:
            notes.append("data-parallel attention")
        return f" ({', '.join(notes)})" if notes else ""


def weights_bytes_per_gpu(
    model: ModelSpec, tensor_parallel: int, weight_dtype: str, pipeline_parallel: int = 1,
    *, expert_parallel: int = 1, data_parallel_attention: bool = False,
    expert_dtype: str | None = None,
) -> int:
    """Bytes of weights one GPU holds (of the last pipeline stage: the fullest).

    The transformer layers' projections are stored in `weight_dtype` and split over the GPUs
    (KV projections replicated when there are fewer KV heads than GPUs). The embedding and LM
    head are split by vocabulary but stay in bf16, as quantised checkpoints (fp8, AWQ, GPTQ)
    keep them; norms are tiny and replicated. Each of `pipeline_parallel` stages holds L/PP
    layers; the first also the embedding, the last the LM head (a tied one too: vLLM loads the
    matrix on both) and the final norm, which makes the last the fullest. Mixture-of-experts
    and MLA models, and data-parallel attention, are laid out by `batchsim.gpu.moe_layout`
    (a MoE model's routed experts in `expert_dtype`, default `weight_dtype`).
    """
    if (model.moe is not None or model.mla is not None or data_parallel_attention
            or model.num_linear_layers):
        layout = Parallelism(tensor_parallel, expert_parallel, data_parallel_attention)
        return layout_weights_bytes_per_gpu(model, layout, weight_dtype, pipeline_parallel,
                                            expert_dtype)
    tp = tensor_parallel
    h, d = model.hidden_size, model.head_dim
    layers = layers_per_stage(model, pipeline_parallel)
    q_heads = model.num_heads // tp
    kv_heads = model.kv_heads_per_gpu(tp)
    mlp_width = math.ceil(model.intermediate_size / tp)
    per_layer = h * (q_heads + 2 * kv_heads) * d + q_heads * d * h + 3 * h * mlp_width
    vocab_rows = math.ceil(model.vocab_size / tp) * h
    # One stage holds both ends unless they are tied; a pipeline's last stage only the LM head.
    both_ends = pipeline_parallel == 1 and not model.tie_word_embeddings
    embeddings = 2 * vocab_rows if both_ends else vocab_rows
    norms = (2 * layers + 1) * h
    quantised = layers * per_layer * bytes_per_element(weight_dtype)
    return round(quantised + (embeddings + norms) * ACTIVATION_BYTES)


def plan_memory(
    model: ModelSpec,
    gpu: GpuProfile,
    *,
    tensor_parallel: int,
    weight_dtype: str,
    kv_dtype: str,
    gpu_memory_utilization: float,
    block_size: int,
    pipeline_parallel: int = 1,
    expert_parallel: int = 1,
    data_parallel_attention: bool = False,
    expert_dtype: str | None = None,
) -> MemoryPlan:
    """Size the KV-block pool: floor((memory x util - weights/tp - reserve) / block bytes),
    on the last pipeline stage's GPUs (the fullest) when there are several. `expert_dtype`:
    the routed experts' format where it differs from the other weights'."""
    check_weight_dtype(weight_dtype)
    check_expert_dtype(expert_dtype, model_name=model.name, routed_experts=model.moe is not None)
    gpu.check_kv_dtype(kv_dtype)
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if block_size < 1:
        raise ValueError(f"block_size must be a positive number of tokens, got {block_size}")
    layout = Parallelism(tensor_parallel, expert_parallel, data_parallel_attention)
    check_parallelism(model, layout)
    problem = span_problem(gpu, tensor_parallel, f"tensor_parallel={tensor_parallel}")
    if problem is not None:
        raise ModelDoesNotFitError(problem)

    usable = gpu.memory_bytes * gpu_memory_utilization
    weights = weights_bytes_per_gpu(model, tensor_parallel, weight_dtype, pipeline_parallel,
                                    expert_parallel=expert_parallel,
                                    data_parallel_attention=data_parallel_attention,
                                    expert_dtype=expert_dtype)
    kv_per_token = kv_bytes_per_token_per_gpu(stage_model(model, pipeline_parallel), layout,
                                              kv_dtype)
    block_bytes = kv_per_token * block_size
    num_blocks = math.floor((usable - weights - gpu.runtime_reserve_bytes) / block_bytes)
    bounded = bounded_bytes_per_sequence_per_gpu(model, layout, kv_dtype)
    plan = MemoryPlan(
        model_name=model.name,
        gpu_name=gpu.name,
        tensor_parallel=tensor_parallel,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        usable_bytes_per_gpu=usable,
        weights_bytes_per_gpu=weights,
        reserve_bytes=gpu.runtime_reserve_bytes,
        kv_bytes_per_token_per_gpu=kv_per_token,
        block_bytes=block_bytes,
        num_blocks=num_blocks,
        pipeline_parallel=pipeline_parallel,
        expert_parallel=expert_parallel,
        data_parallel_attention=data_parallel_attention,
        sequence_blocks=math.ceil(bounded / block_bytes),
        expert_dtype=expert_dtype if expert_dtype != weight_dtype else None,
    )
    if num_blocks <= 0:
        raise ModelDoesNotFitError(_does_not_fit_message(plan))
    return plan


def _does_not_fit_message(plan: MemoryPlan) -> str:
    offers = (
        f"{plan.gpu_name} offers {plan.usable_bytes_per_gpu / _GB:.1f} GB at "
        f"gpu_memory_utilization={plan.gpu_memory_utilization:g}"
    )
    if plan.weights_bytes_per_gpu >= plan.usable_bytes_per_gpu:
        return (
            f"{plan.model_name} in {plan.formats()} needs "
            f"{plan.weights_bytes_per_gpu / _GB:.1f} GB of weights per GPU at "
            f"tensor_parallel={plan.tensor_parallel} but {offers}; raise tensor_parallel or "
            "quantise the weights"
        )
    return (
        f"{plan.model_name} in {plan.formats()} at tensor_parallel={plan.tensor_parallel} "
        f"leaves no room for the KV cache: {offers}, less than "
        f"{plan.weights_bytes_per_gpu / _GB:.1f} GB of weights + {plan.reserve_bytes / _GB:.1f} "
        f"GB runtime reserve + one {plan.block_size}-token block "
        f"({plan.block_bytes / 1e6:.1f} MB); raise tensor_parallel, quantise the weights or "
        "raise gpu_memory_utilization"
    )
