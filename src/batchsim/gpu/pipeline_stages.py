"""How a replica's layers and GPUs divide into pipeline stages (docs/design.md §3, pipeline
parallelism).

Layers are split into `pipeline_parallel` contiguous blocks of L / PP layers, stage 0 first: the
rule vLLM's `get_pp_indices` applies when PP divides L. (vLLM also accepts an uneven split,
giving the extra layers to the stages before the last; batchsim asks for an even one, so every
stage costs the same and a degree that does not divide the layers is reported as an error.)
The first stage also holds the embedding, the last the final norm and the LM head.

GPUs are numbered stage-major: stage s holds GPUs s·TP … s·TP + TP − 1, and TP rank r of stage
s sends its activations to rank r of stage s + 1. A replica that spans nodes starts on a node
boundary, so a stage boundary crosses nodes when those two GPUs sit on different nodes.
"""

from __future__ import annotations

from dataclasses import replace

from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.model_spec import ModelError, ModelSpec


def check_pipeline_parallel(model: ModelSpec, pipeline_parallel: int) -> None:
    """Raise ModelError unless `pipeline_parallel` stages split the layers evenly."""
    pp = pipeline_parallel
    if pp < 1:
        raise ModelError(f"pipeline_parallel must be a positive integer, got {pp}")
    if pp > model.num_layers:
        raise ModelError(
            f"pipeline_parallel={pp} asks for more stages than {model.name}'s "
            f"{model.num_layers} layers"
        )
    if model.num_layers % pp:
        raise ModelError(
            f"{model.name} has {model.num_layers} layers, which pipeline_parallel={pp} does not "
            "divide (each stage holds an equal share)"
        )
    if pp > 1 and model.moe is not None and model.moe.first_dense_layers:
        # Every stage is priced as the same slice of layers; a model whose first layers differ
        # from the rest (DeepSeek-V3's dense ones) would get them in every stage.
        raise ModelError(
            f"{model.name}'s first {model.moe.first_dense_layers} layers are dense and the rest "
            "mixture-of-experts: pipeline stages of unequal layers are not modelled "
            "(use pipeline_parallel: 1)"
        )
    if pp > 1 and model.layer_kinds is not None and model.layer_kinds.is_hybrid:
        # A stage's share of each layer kind depends on where the kinds fall in the stack.
        raise ModelError(
            f"{model.name} mixes attention kinds ({model.layer_kinds.describe()}): pipeline "
            "stages of hybrid models are not modelled (use pipeline_parallel: 1)"
        )


def layers_per_stage(model: ModelSpec, pipeline_parallel: int) -> int:
    check_pipeline_parallel(model, pipeline_parallel)
    return model.num_layers // pipeline_parallel


def stage_model(model: ModelSpec, pipeline_parallel: int) -> ModelSpec:
    """The model cut down to one stage's layers (its shapes are the full model's)."""
    return replace(model, num_layers=layers_per_stage(model, pipeline_parallel))


def boundary_crosses_node(boundary: int, tensor_parallel: int, gpus_per_node: int) -> bool:
    """Whether the hand-off from stage `boundary` to stage `boundary + 1` leaves a node.

    Any TP rank whose pair straddles a node boundary makes the whole hand-off wait for the
    slower link.
    """
    first = boundary * tensor_parallel
    return any(
        (first + r) // gpus_per_node != (first + tensor_parallel + r) // gpus_per_node
        for r in range(tensor_parallel)
    )


def boundary_bandwidths(
    gpu: GpuProfile, tensor_parallel: int, pipeline_parallel: int
) -> tuple[float, ...]:
    """Bytes/s of the link behind each of the PP − 1 stage boundaries.

    Within an NVLink domain (`GpuProfile.domain_gpus`: one HGX node, or a whole NVL72 rack) that
    is NVLink (`intra_node_bandwidth_bytes_per_s`). Beyond it a GPU reaches its peer through a
    NIC behind its PCIe switch (GPUDirect RDMA), bounded by the host link
    (`pcie_bandwidth_bytes_per_s`) and by the NIC where the profile gives one
    (`inter_node_bandwidth_bytes_per_s`; an A100 node's 200 Gb/s HDR NIC per GPU moves 25 GB/s,
    under its PCIe 4.0 x16's 32 GB/s).
    """
    network = gpu.pcie_bandwidth_bytes_per_s
    if gpu.inter_node_bandwidth_bytes_per_s is not None:
        network = min(network, gpu.inter_node_bandwidth_bytes_per_s)
    return tuple(
        network
        if boundary_crosses_node(b, tensor_parallel, gpu.domain_gpus)
        else gpu.intra_node_bandwidth_bytes_per_s
        for b in range(pipeline_parallel - 1)
    )
