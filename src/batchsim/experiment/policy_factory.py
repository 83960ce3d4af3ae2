"""Build one replica's batching policy from an arm of the experiment file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchsim.experiment.kv_tier_setup import TierSizing, build_tiers, swap_space_for
from batchsim.experiment.schema import (
    AdmissionConfig,
    AdmissionReserveConfig,
    Arm,
    ChunkedPrefillArm,
    ContinuousArm,
    FairShareOrdering,
    OrderingConfig,
    PriorityOrdering,
    ShortestPromptFirstOrdering,
    StaticArm,
    arm_kv_allocation,
)
from batchsim.experiment.schema.kv_cache import KVCacheConfig
from batchsim.experiment.schema.kv_tier_arms import arm_kv_tiers
from batchsim.policies.admission import AdmissionControl, KVReserve
from batchsim.policies.chunked_prefill import ChunkedPrefill
from batchsim.policies.continuous import ContinuousBatching
from batchsim.policies.fair_share import FairShareQueue
from batchsim.policies.ordering import (
    FcfsQueue,
    KeyedQueue,
    WaitingQueue,
    priority_key,
    shortest_prompt_key,
)
from batchsim.policies.speculative import Speculation
from batchsim.policies.static import StaticBatching
from batchsim.sim.kv_cache import KVBlockPool
from batchsim.sim.kv_contiguous import ContiguousKVPool
from batchsim.sim.kv_hybrid import HybridKVBlockPool
from batchsim.sim.kv_tiered_pool import TieredKVBlockPool
from batchsim.sim.policy_protocol import BatchingPolicy


class ArmError(ValueError):
    """An arm's settings contradict the rest of the experiment."""


def effective_token_budget(arm: ContinuousArm, max_model_len: int, index: int) -> int:
    """max_num_batched_tokens, defaulting to max_model_len.

    Without chunked prefill a prompt is prefilled in one step, so (as vLLM requires) the budget
    must hold the longest possible request; otherwise a recomputed request could never return.
    """
    budget = arm.max_num_batched_tokens or max_model_len
    if budget < max_model_len:
        raise ArmError(
            f"policies.{index}.max_num_batched_tokens: {budget} is smaller than max_model_len="
            f"{max_model_len}; without chunked prefill it must be at least max_model_len "
            "(raise it, or set max_model_len lower)"
        )
    return budget


def build_admission(config: AdmissionConfig | None) -> AdmissionControl | None:
    if config is None:
        return None
    return AdmissionControl(max_queue=config.max_queue,
                            max_predicted_wait_s=config.max_predicted_wait_s,
                            window=config.wait_window)


def build_reserve(config: AdmissionReserveConfig | None) -> KVReserve | None:
    if config is None:
        return None
    return KVReserve(assumed_max_new_tokens=config.assumed_max_new_tokens,
                     init_ratio=config.new_token_ratio, min_ratio=config.min_new_token_ratio,
                     decay_steps=config.decay_steps, admitted_share=config.admitted_share,
                     remaining_cap=config.remaining_cap)


def build_ordering(config: OrderingConfig) -> WaitingQueue:
    """A fresh waiting queue (one per replica) for an arm's `ordering`."""
    if isinstance(config, PriorityOrdering):
        return KeyedQueue(priority_key(config.aging_s))
    if isinstance(config, ShortestPromptFirstOrdering):
        return KeyedQueue(shortest_prompt_key(config.aging_tokens_per_s))
    if isinstance(config, FairShareOrdering):
        return FairShareQueue(config.input_token_weight, config.output_token_weight)
    return FcfsQueue()


def arm_prefix_caching(arm: Arm, experiment_default: bool) -> bool:
    """Whether the arm caches prefixes: its own setting, else the experiment's. Static
    batching keeps its own batch accounting, so only the iteration-level policies cache."""
    if not isinstance(arm, ContinuousArm | ChunkedPrefillArm):
        return False
    return experiment_default if arm.prefix_caching is None else arm.prefix_caching


@dataclass(frozen=True, slots=True)
class ReplicaResources:
    """What every replica's policy is built with, whatever its kind."""

    pool: KVBlockPool
    swap_blocks: int
    max_model_len: int
    index: int  # the arm's position, for error messages
    speculation: Speculation | None


def _static(arm: StaticArm, res: ReplicaResources) -> BatchingPolicy:
    return StaticBatching(pool=res.pool, max_batch_size=arm.max_batch_size,
                          max_wait_s=arm.max_wait_s, max_output_tokens=arm.max_output_tokens,
                          ordering=build_ordering(arm.ordering))


def _chunked_prefill(arm: ChunkedPrefillArm, res: ReplicaResources) -> BatchingPolicy:
    return ChunkedPrefill(
        pool=res.pool, token_budget=arm.token_budget, max_num_seqs=arm.max_num_seqs,
        long_prefill_token_threshold=arm.long_prefill_token_threshold,
        preemption=arm.preemption, swap_space=swap_space_for(res.pool, res.swap_blocks),
        admission=build_admission(arm.admission),
        reserve=build_reserve(arm.admission_reserve), ordering=build_ordering(arm.ordering),
        speculation=res.speculation, mixed_prefill=arm.mixed_prefill,
        victim_rule=arm.preemption_victim,
    )


def _continuous(arm: ContinuousArm, res: ReplicaResources) -> BatchingPolicy:
    return ContinuousBatching(
        pool=res.pool, max_num_seqs=arm.max_num_seqs,
        max_num_batched_tokens=effective_token_budget(arm, res.max_model_len, res.index),
        preemption=arm.preemption, swap_space=swap_space_for(res.pool, res.swap_blocks),
        admission=build_admission(arm.admission), reserve=build_reserve(arm.admission_reserve),
        ordering=build_ordering(arm.ordering), speculation=res.speculation,
        victim_rule=arm.preemption_victim,
    )


# The registry seam: an arm `kind` of the schema -> the builder of its replicas' policy. A new
# colocated policy adds its arm model to the schema and one entry here (docs/design.md §4).
# `disaggregated` arms build two pools instead (experiment/disaggregation.py).
POLICY_BUILDERS: dict[str, Callable[[Any, ReplicaResources], BatchingPolicy]] = {
    "static": _static,
    "continuous": _continuous,
    "chunked_prefill": _chunked_prefill,
}


def build_pool(arm: Arm, num_blocks: int, block_size: int, max_model_len: int, *,
               prefix_caching: bool = False, kv_cache: KVCacheConfig | None = None,
               sequence_blocks: int = 0, tier_sizing: TierSizing | None = None) -> KVBlockPool:
    """A replica's KV pool: paged, or contiguous where the arm or `kv_cache.allocation` asks
    (the schema refused the combinations contiguous cannot run, schema/kv_allocation.py).
    `sequence_blocks` > 0 (a hybrid model's bounded window and state blocks): a paged pool
    that gives each sequence that many more (the deployment refused the rest). An arm with
    lower KV tiers gets a tiered pool, sized by `tier_sizing` (needed then)."""
    config = kv_cache or KVCacheConfig()
    if arm_kv_allocation(arm, config) == "contiguous":
        return ContiguousKVPool(num_blocks, block_size, reserve=config.contiguous_reserve,
                                max_model_len=max_model_len)
    if sequence_blocks:
        return HybridKVBlockPool(num_blocks, block_size, sequence_blocks=sequence_blocks)
    tiers = arm_kv_tiers(arm, config.model_copy(update={"prefix_caching": prefix_caching}))
    if tiers:
        if tier_sizing is None:
            raise ArmError("a pool with lower KV tiers needs the KV block's bytes")
        return TieredKVBlockPool(num_blocks, block_size,
                                 build_tiers(tiers, tier_sizing.block_bytes),
                                 layers=tier_sizing.layers)
    return KVBlockPool(num_blocks, block_size,
                       prefix_caching=arm_prefix_caching(arm, prefix_caching))


def build_policy(arm: Arm, index: int, *, num_blocks: int, block_size: int,
                 swap_blocks: int, max_model_len: int,
                 prefix_caching: bool = False, kv_cache: KVCacheConfig | None = None,
                 speculation: Speculation | None = None,
                 sequence_blocks: int = 0,
                 tier_sizing: TierSizing | None = None) -> BatchingPolicy:
    """`kv_cache`: its allocation keys (null: paged); `block_size` and `prefix_caching` are
    given apart, as tests build pools without a whole config."""
    pool = build_pool(arm, num_blocks, block_size, max_model_len,
                      prefix_caching=prefix_caching, kv_cache=kv_cache,
                      sequence_blocks=sequence_blocks, tier_sizing=tier_sizing)
    resources = ReplicaResources(pool, swap_blocks, max_model_len, index, speculation)
    return POLICY_BUILDERS[arm.kind](arm, resources)
