"""Build a `disaggregated` arm (docs/design.md §2, §4): resolve each pool's GPU, memory and cost
model,
make its replicas' policies, wire them to the KV link, and add the arm's own outputs."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from batchsim.experiment.engine_profile import EngineProfile
from batchsim.experiment.policy_factory import ArmError
from batchsim.experiment.pool_scaling import pool_scalers, pool_slots
from batchsim.experiment.routing import build_router
from batchsim.experiment.schema import DisaggregatedArm, Experiment
from batchsim.experiment.traffic import BuiltTraffic
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import bytes_per_element
from batchsim.gpu.hardware import GpuProfile, HardwareError, load_gpu_profile
from batchsim.gpu.memory import MemoryPlan, plan_memory
from batchsim.gpu.model_spec import ModelError, ModelSpec
from batchsim.metrics.transfer import pool_step_stats, transfer_columns, transfer_metrics
from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.disaggregated import DecodePool, PrefillPool
from batchsim.sim.disaggregated import DisaggregatedSimulation, LinkSpec
from batchsim.sim.kv_cache import HostSwapSpace, KVBlockPool
from batchsim.sim.policy_protocol import BatchingPolicy


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool of a disaggregated arm, resolved."""

    role: str  # "prefill" or "decode"
    replicas: int
    tensor_parallel: int
    gpu: GpuProfile
    memory: MemoryPlan
    num_blocks: int  # per replica
    swap_blocks: int
    cost_model: RooflineCostModel

    def describe(self) -> dict[str, object]:
        return {"replicas": self.replicas, "tensor_parallel": self.tensor_parallel,
                "gpus": self.replicas * self.tensor_parallel, "hardware": self.gpu.name,
                "kv_blocks_per_replica": self.num_blocks,
                "memory": self.memory.describe(kv_blocks=self.num_blocks)}


def resolve_pool(exp: Experiment, arm: DisaggregatedArm, index: int, role: str,
                 model: ModelSpec, base_dir: Path, engine: EngineProfile) -> Pool:
    """The pool's GPU and tensor parallelism (the arm's, else the experiment's), its KV
    capacity by the same memory plan as every replica, and its cost model."""
    hardware: str | None = getattr(arm, f"{role}_hardware")
    tensor_parallel: int | None = getattr(arm, f"{role}_tensor_parallel")
    tp = tensor_parallel or exp.tensor_parallel
    with _pool_key(f"policies.{index}.{role}_hardware" if hardware else "hardware", role):
        gpu = engine.on_gpu(load_gpu_profile(hardware or exp.hardware, base_dir))
    tp_key = f"policies.{index}.{role}_tensor_parallel" if tensor_parallel else "tensor_parallel"
    with _pool_key(tp_key, role):
        memory = plan_memory(model, gpu, tensor_parallel=tp, weight_dtype=exp.dtype.weights,
                             kv_dtype=exp.dtype.kv_cache,
                             gpu_memory_utilization=exp.gpu_memory_utilization,
                             block_size=exp.kv_cache.block_size)
    cost = RooflineCostModel(model, gpu, tensor_parallel=tp, weight_dtype=exp.dtype.weights,
                             kv_dtype=exp.dtype.kv_cache)
    return Pool(role, pool_slots(arm, role), tp, gpu, memory,
                exp.kv_cache.num_blocks or memory.num_blocks,
                int(exp.kv_cache.swap_space_gb * 1e9 // memory.block_bytes), cost)


def _check_layout(exp: Experiment, index: int) -> None:
    """Pools are tensor-parallel replicas only: refuse a layout they would silently ignore."""
    for key, value, plain in (("pipeline_parallel", exp.pipeline_parallel, 1),
                              ("expert_parallel", exp.expert_parallel, 1),
                              ("data_parallel_attention", exp.data_parallel_attention, False)):
        if value != plain:
            raise ArmError(f"{key}: {value} is not modelled for the disaggregated arm "
                           f"policies.{index} (its pools are tensor-parallel replicas); "
                           "compare it in another experiment")


@contextmanager
def _pool_key(key: str, role: str) -> Iterator[None]:
    """Re-raise a loading or memory error as an ArmError naming the pool's key."""
    try:
        yield
    except (HardwareError, ModelError, ValueError) as err:
        raise ArmError(f"{key} ({role} pool): {err}") from err


def prefill_policy(arm: DisaggregatedArm, pool: Pool, max_model_len: int) -> PrefillPool:
    kv = KVBlockPool(pool.num_blocks, pool.memory.block_size)
    budget = arm.prefill_token_budget or max_model_len
    inner: BatchingPolicy
    if arm.prefill_chunked:
        inner = ChunkedPrefill(pool=kv, token_budget=budget,
                               max_num_seqs=arm.prefill_max_num_seqs)
    else:
        inner = ContinuousBatching(pool=kv, max_num_seqs=arm.prefill_max_num_seqs,
                                   max_num_batched_tokens=budget)
    return PrefillPool(inner)


def decode_policy(arm: DisaggregatedArm, pool: Pool, max_model_len: int) -> DecodePool:
    # The token budget holds a whole request, so one recomputed after preemption fits a step.
    inner = ContinuousBatching(
        pool=KVBlockPool(pool.num_blocks, pool.memory.block_size),
        max_num_seqs=arm.decode_max_num_seqs, max_num_batched_tokens=max_model_len,
        preemption=arm.decode_preemption, swap_space=HostSwapSpace(pool.swap_blocks),
    )
    return DecodePool(inner)


def link_spec(exp: Experiment, arm: DisaggregatedArm, model: ModelSpec) -> LinkSpec:
    link = arm.kv_link
    bandwidth = math.inf if link.bandwidth_gb_s is None else link.bandwidth_gb_s * 1e9
    # The whole model's KV per token: each prefill GPU sends its shard, whatever the two TPs.
    per_token = model.kv_bytes_per_token(bytes_per_element(exp.dtype.kv_cache))
    return LinkSpec(bandwidth, link.latency_us * 1e-6, link.layerwise, model.num_layers,
                    per_token)


@dataclass(slots=True)
class DisaggregatedRun:
    """A disaggregated arm ready to run, and how to add its outputs afterwards."""

    simulation: DisaggregatedSimulation
    prefill: Pool
    decode: Pool

    def add_outputs(self, requests: pd.DataFrame, metrics: dict[str, object],
                    exp: Experiment) -> pd.DataFrame:
        """Per-request transfer columns; transfer, link and per-pool summary metrics."""
        requests = requests.assign(**transfer_columns(self.simulation))
        window = metrics["window_s"]
        assert isinstance(window, float)
        start, end = exp.warmup_s, exp.warmup_s + window
        metrics.update(transfer_metrics(requests, self.simulation, warmup_s=exp.warmup_s,
                                        cooldown_s=exp.cooldown_s, start=start, end=end))
        record = self.simulation.record
        first = self.prefill.replicas
        pools = {}
        for pool, replicas in ((self.prefill, range(first)),
                               (self.decode, range(first, first + self.decode.replicas))):
            pools[pool.role] = {**pool.describe(), **pool_step_stats(record, replicas, start, end)}
        metrics["pools"] = pools
        metrics["gpus"] = sum(p.replicas * p.tensor_parallel for p in (self.prefill, self.decode))
        return requests


def build_disaggregated(
    exp: Experiment, arm: DisaggregatedArm, index: int, *, model: ModelSpec, base_dir: Path,
    max_model_len: int, traffic: BuiltTraffic, on_progress: Callable[[float], None] | None,
    engine: EngineProfile,
) -> DisaggregatedRun:
    _check_layout(exp, index)
    prefill = resolve_pool(exp, arm, index, "prefill", model, base_dir, engine)
    decode = resolve_pool(exp, arm, index, "decode", model, base_dir, engine)
    shared_queue = exp.router == "shared_queue"
    prefill_scaler, decode_scaler = pool_scalers(arm)
    simulation = DisaggregatedSimulation(
        [prefill_policy(arm, prefill, max_model_len) for _ in range(prefill.replicas)],
        [decode_policy(arm, decode, max_model_len) for _ in range(decode.replicas)],
        prefill_cost=prefill.cost_model, decode_cost=decode.cost_model,
        link=link_spec(exp, arm, model), traffic=traffic.traffic,
        router=build_router(exp.router, prefill.cost_model), shared_queue=shared_queue,
        max_model_len=max_model_len, fast_path=exp.simulation.fast_path, on_progress=on_progress,
        frontend=engine.frontend(prefill.replicas),  # the client talks to the prefill pool
        prefill_scaler=prefill_scaler, decode_scaler=decode_scaler,
    )
    return DisaggregatedRun(simulation, prefill, decode)
