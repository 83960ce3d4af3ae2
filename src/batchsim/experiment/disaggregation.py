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

from batchsim.experiment.deployment import expert_dtype
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
from batchsim.gpu.moe_layout import Parallelism, check_parallelism
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
    layout: Parallelism

    def describe(self) -> dict[str, object]:
        described: dict[str, object] = {
            "replicas": self.replicas, "tensor_parallel": self.tensor_parallel,
            "gpus": self.replicas * self.tensor_parallel, "hardware": self.gpu.name}
        # Only a pool laid out beyond tensor parallelism names it: plain pools read as before.
        if self.layout.expert_parallel > 1 or self.layout.data_parallel_attention:
            described.update(expert_parallel=self.layout.expert_parallel,
                             data_parallel_attention=self.layout.data_parallel_attention)
        return {**described, "kv_blocks_per_replica": self.num_blocks,
                "memory": self.memory.describe(kv_blocks=self.num_blocks)}


def resolve_pool(exp: Experiment, arm: DisaggregatedArm, index: int, role: str,
                 model: ModelSpec, base_dir: Path, engine: EngineProfile) -> Pool:
    """The pool's GPU and layout (the arm's, else the experiment's), its KV capacity by the
    same memory plan as every replica, and its cost model."""
    _check_layout(exp, index)
    hardware: str | None = getattr(arm, f"{role}_hardware")
    with _pool_key(f"policies.{index}.{role}_hardware" if hardware else "hardware", role):
        gpu = engine.on_gpu(load_gpu_profile(hardware or exp.hardware, base_dir))
    layout, keys = _pool_layout(exp, arm, index, role)
    experts = expert_dtype(exp, model)
    if not layout.data_parallel_attention:  # heads split by tensor parallelism
        with _pool_key(keys.tensor_parallel, role):
            model.check_tensor_parallel(layout.tensor_parallel)
    with _pool_key(keys.layout, role):
        check_parallelism(model, layout)
    with _pool_key(keys.tensor_parallel, role):
        memory = plan_memory(model, gpu, tensor_parallel=layout.tensor_parallel,
                             weight_dtype=exp.dtype.weights, kv_dtype=exp.dtype.kv_cache,
                             gpu_memory_utilization=exp.gpu_memory_utilization,
                             block_size=exp.kv_cache.block_size,
                             expert_parallel=layout.expert_parallel,
                             data_parallel_attention=layout.data_parallel_attention,
                             expert_dtype=experts)
    cost = RooflineCostModel(model, gpu, tensor_parallel=layout.tensor_parallel,
                             weight_dtype=exp.dtype.weights, kv_dtype=exp.dtype.kv_cache,
                             expert_parallel=layout.expert_parallel,
                             data_parallel_attention=layout.data_parallel_attention,
                             moe_imbalance=exp.moe_imbalance, expert_dtype=experts)
    return Pool(role, pool_slots(arm, role), layout.tensor_parallel, gpu, memory,
                exp.kv_cache.num_blocks or memory.num_blocks,
                int(exp.kv_cache.swap_space_gb * 1e9 // memory.block_bytes), cost, layout)


@dataclass(frozen=True, slots=True)
class _LayoutKeys:
    """The experiment keys a pool's layout errors are reported under."""

    tensor_parallel: str
    layout: str  # expert parallelism or data-parallel attention


def _pool_layout(exp: Experiment, arm: DisaggregatedArm, index: int,
                 role: str) -> tuple[Parallelism, _LayoutKeys]:
    """A pool's tensor and expert parallelism and data-parallel attention, each the arm's
    `<role>_...` key, else the experiment's, with the key each came from."""
    def pick(name: str, default: object) -> tuple[object, str]:
        own = getattr(arm, f"{role}_{name}")
        return (default, name) if own is None else (own, f"policies.{index}.{role}_{name}")

    tp, tp_key = pick("tensor_parallel", exp.tensor_parallel)
    ep, ep_key = pick("expert_parallel", exp.expert_parallel)
    dp, dp_key = pick("data_parallel_attention", exp.data_parallel_attention)
    assert isinstance(tp, int) and isinstance(ep, int) and isinstance(dp, bool)
    layout_key = ep_key if ep > 1 or not dp else dp_key
    return Parallelism(tp, ep, dp), _LayoutKeys(tp_key, layout_key)


def _check_layout(exp: Experiment, index: int) -> None:
    """Pools are single-stage replicas: refuse pipeline stages they would silently ignore."""
    if exp.pipeline_parallel != 1:
        raise ArmError(f"pipeline_parallel: {exp.pipeline_parallel} is not modelled for the "
                       f"disaggregated arm policies.{index} (its pools are single-stage "
                       "replicas); compare it in another experiment")


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


def link_spec(exp: Experiment, arm: DisaggregatedArm, index: int, model: ModelSpec,
              prefill: Pool, decode: Pool) -> LinkSpec:
    """The arm's KV link; `bandwidth_gb_s: nics` derives one per prefill replica from the
    pools' NICs, and refuses a profile that gives none under the key."""
    link = arm.kv_link
    nics = link.bandwidth_gb_s == "nics"
    if nics:
        bandwidth = min(_nic_bytes_s(pool, index) for pool in (prefill, decode))
    else:
        bandwidth = math.inf if link.bandwidth_gb_s is None else float(link.bandwidth_gb_s) * 1e9
    # The whole model's KV per token: each prefill GPU sends its shard, whatever the two TPs.
    per_token = model.kv_bytes_per_token(bytes_per_element(exp.dtype.kv_cache))
    return LinkSpec(bandwidth, link.latency_us * 1e-6, link.layerwise, model.num_layers,
                    per_token, per_prefill_replica=nics)


def _nic_bytes_s(pool: Pool, index: int) -> float:
    """What one replica of `pool` sends or receives over its GPUs' NICs, per direction: each
    GPU its own KV shard over its own NIC (one rail per GPU, docs/how-to/multi-node.md)."""
    nic = pool.gpu.inter_node_bandwidth_bytes_per_s
    if nic is None:
        raise ArmError(f"policies.{index}.kv_link.bandwidth_gb_s: nics needs the "
                       f"{pool.role} pool's GPU profile ({pool.gpu.name}) to give "
                       "inter_node_bandwidth_bytes_per_s; give the link's bandwidth in GB/s")
    return pool.tensor_parallel * nic


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
    prefill = resolve_pool(exp, arm, index, "prefill", model, base_dir, engine)
    decode = resolve_pool(exp, arm, index, "decode", model, base_dir, engine)
    shared_queue = exp.router == "shared_queue"
    prefill_scaler, decode_scaler = pool_scalers(arm)
    simulation = DisaggregatedSimulation(
        [prefill_policy(arm, prefill, max_model_len) for _ in range(prefill.replicas)],
        [decode_policy(arm, decode, max_model_len) for _ in range(decode.replicas)],
        prefill_cost=prefill.cost_model, decode_cost=decode.cost_model,
        link=link_spec(exp, arm, index, model, prefill, decode), traffic=traffic.traffic,
        router=build_router(exp.router, prefill.cost_model), shared_queue=shared_queue,
        max_model_len=max_model_len, fast_path=exp.simulation.fast_path, on_progress=on_progress,
        # The client's requests go in through the prefill instances' API servers; each decode
        # instance's own server streams its tokens back.
        frontend=engine.frontend(prefill.replicas, streaming_replicas=decode.replicas),
        prefill_scaler=prefill_scaler, decode_scaler=decode_scaler,
        first_token=engine.spec.handoff_first_token,
    )
    return DisaggregatedRun(simulation, prefill, decode)
