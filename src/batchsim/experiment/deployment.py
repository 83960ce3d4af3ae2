"""What an experiment resolves to before any traffic: the model, the GPU, the memory plan and
the cost model, with every loader error under the experiment key that asked for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from batchsim.experiment.engine_profile import (
    EngineProfile,
    EngineProfileError,
    load_engine_profile,
)
from batchsim.experiment.hybrid_checks import check_hybrid_arms
from batchsim.experiment.schema import Experiment
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import DtypeError, check_expert_dtype
from batchsim.gpu.hardware import GpuProfile, HardwareError, load_gpu_profile
from batchsim.gpu.memory import MemoryPlan, ModelDoesNotFitError, plan_memory
from batchsim.gpu.model_spec import ModelError, ModelSpec, load_model
from batchsim.gpu.moe_layout import Parallelism, check_parallelism
from batchsim.gpu.pipeline_cost import PipelineCostModel, build_cost_model
from batchsim.gpu.pipeline_stages import check_pipeline_parallel


@dataclass(frozen=True, slots=True)
class Deployment:
    """What the experiment resolves to before any traffic: model, GPU, memory, cost model."""

    model: ModelSpec
    gpu: GpuProfile  # with the engine's per-step overheads in place of the profile's priors
    kernel_gpu: GpuProfile  # as the profile has it: prices passes run inside an engine step
    memory: MemoryPlan
    num_blocks: int
    swap_blocks: int
    max_model_len: int
    cost_model: RooflineCostModel | PipelineCostModel
    engine: EngineProfile

    def describe_memory(self) -> str:
        """The memory plan with the KV pool the simulation used (a set `kv_cache.num_blocks`
        in place of what memory leaves)."""
        return self.memory.describe(kv_blocks=self.num_blocks)


def resolve_deployment(exp: Experiment, base_dir: Path) -> Deployment:
    """Load the model and GPU, plan memory, build the cost model; errors name their key."""
    with keyed_error("model", ModelError):
        model = load_model(exp.model, base_dir)
    engine = resolve_engine(exp, base_dir)
    with keyed_error("hardware", HardwareError):
        kernel_gpu = load_gpu_profile(exp.hardware, base_dir)
        gpu = engine.on_gpu(kernel_gpu)
    with keyed_error("pipeline_parallel", ModelError):
        check_pipeline_parallel(model, exp.pipeline_parallel)
    _check_layout(exp, model)
    check_hybrid_arms(exp, model)
    with keyed_error("dtype.kv_cache", DtypeError):
        gpu.check_kv_dtype(exp.dtype.kv_cache)
    experts = expert_dtype(exp, model)
    with keyed_error("tensor_parallel", ModelError, ModelDoesNotFitError):
        memory = plan_memory(
            model, gpu, tensor_parallel=exp.tensor_parallel, weight_dtype=exp.dtype.weights,
            kv_dtype=exp.dtype.kv_cache, gpu_memory_utilization=exp.gpu_memory_utilization,
            block_size=exp.kv_cache.block_size, pipeline_parallel=exp.pipeline_parallel,
            expert_parallel=exp.expert_parallel,
            data_parallel_attention=exp.data_parallel_attention, expert_dtype=experts,
        )
    cost: RooflineCostModel | PipelineCostModel
    if model.moe is not None and exp.pipeline_parallel == 1:  # routed experts: gpu/moe_cost.py
        cost = RooflineCostModel(
            model, gpu, tensor_parallel=exp.tensor_parallel, weight_dtype=exp.dtype.weights,
            kv_dtype=exp.dtype.kv_cache, expert_parallel=exp.expert_parallel,
            data_parallel_attention=exp.data_parallel_attention,
            moe_imbalance=exp.moe_imbalance, expert_dtype=experts)
    else:
        cost = build_cost_model(model, gpu, tensor_parallel=exp.tensor_parallel,
                                pipeline_parallel=exp.pipeline_parallel,
                                weight_dtype=exp.dtype.weights, kv_dtype=exp.dtype.kv_cache,
                                expert_dtype=experts)
    swap_blocks = int(exp.kv_cache.swap_space_gb * 1e9 // memory.block_bytes)
    return Deployment(
        model=model, gpu=gpu, kernel_gpu=kernel_gpu, memory=memory,
        num_blocks=exp.kv_cache.num_blocks or memory.num_blocks, swap_blocks=swap_blocks,
        max_model_len=exp.max_model_len or model.max_position_embeddings, cost_model=cost,
        engine=engine,
    )


def expert_dtype(exp: Experiment, model: ModelSpec) -> str | None:
    """`dtype.experts` (None: the weights' format), refused under its key for a model without
    routed experts."""
    with keyed_error("dtype.experts", DtypeError):
        return check_expert_dtype(exp.dtype.experts, model_name=model.name,
                                  routed_experts=model.moe is not None)


def resolve_engine(exp: Experiment, base_dir: Path) -> EngineProfile:
    """The serving engine profile the experiment names, errors under `engine`."""
    with keyed_error("engine", EngineProfileError):
        return load_engine_profile(exp.engine, base_dir)


def _check_layout(exp: Experiment, model: ModelSpec) -> None:
    """Expert-parallel and data-parallel-attention errors, under the key that asked for them."""
    layout = Parallelism(exp.tensor_parallel, exp.expert_parallel, exp.data_parallel_attention)
    if not exp.data_parallel_attention:
        with keyed_error("tensor_parallel", ModelError):
            model.check_tensor_parallel(exp.tensor_parallel)
    key = "expert_parallel" if exp.expert_parallel > 1 else "data_parallel_attention"
    with keyed_error(key, ModelError):
        check_parallelism(model, layout)
        if exp.pipeline_parallel > 1 and (exp.expert_parallel > 1
                                          or exp.data_parallel_attention):
            raise ModelError("expert parallelism and data-parallel attention are not modelled "
                             "together with pipeline_parallel > 1")


@contextmanager
def keyed_error(key: str, *kinds: type[ValueError]) -> Iterator[None]:
    """Re-raise a loader error with the experiment key it came from in front."""
    try:
        yield
    except kinds as err:
        raise type(err)(f"{key}: {err}") from err


def deployment_summary(exp: Experiment, deployment: Deployment) -> dict[str, object]:
    """What a colocated arm runs on (its own `deployment:` or the top level's), for its row."""
    memory = deployment.memory
    return {
        "hardware": deployment.gpu.name, "tensor_parallel": exp.tensor_parallel,
        "pipeline_parallel": exp.pipeline_parallel, "expert_parallel": exp.expert_parallel,
        "data_parallel_attention": exp.data_parallel_attention, "replicas": exp.replicas,
        "kv_tokens_per_replica": deployment.num_blocks * exp.kv_cache.block_size,
        "weights_bytes_per_gpu": memory.weights_bytes_per_gpu,
        "memory": deployment.describe_memory(),
    }
