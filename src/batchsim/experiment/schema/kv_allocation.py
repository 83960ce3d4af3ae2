"""Which arms may lay their KV cache out contiguously (`kv_cache.allocation`, an arm's
`kv_allocation`), checked with the file so that `validate` refuses what `run` would."""

from batchsim.experiment.schema.arms import Arm, ChunkedPrefillArm, ContinuousArm
from batchsim.experiment.schema.common import rule_error
from batchsim.experiment.schema.kv_cache import KVAllocation, KVCacheConfig


def arm_kv_allocation(arm: Arm, kv_cache: KVCacheConfig) -> KVAllocation:
    """The arm's own `kv_allocation`, else the experiment's."""
    own = getattr(arm, "kv_allocation", None)
    return kv_cache.allocation if own is None else own


def check_kv_allocation(arms: list[Arm], kv_cache: KVCacheConfig) -> None:
    """Raise a rule error naming the key of the first arm that cannot run contiguous."""
    for index, arm in enumerate(arms):
        if arm_kv_allocation(arm, kv_cache) != "contiguous":
            continue
        if not isinstance(arm, ContinuousArm | ChunkedPrefillArm):
            raise rule_error("kv_cache.allocation", (
                f"contiguous applies to continuous and chunked_prefill arms; policies.{index} "
                f"({arm.kind}) lays out its own KV (set `kv_allocation: contiguous` on the "
                "arms that should use it instead)"))
        _check_iteration_arm(arm, index, kv_cache)


def _check_iteration_arm(arm: ContinuousArm | ChunkedPrefillArm, index: int,
                         kv_cache: KVCacheConfig) -> None:
    prefix = kv_cache.prefix_caching if arm.prefix_caching is None else arm.prefix_caching
    if prefix:
        key = ("kv_cache.prefix_caching" if arm.prefix_caching is None
               else f"policies.{index}.prefix_caching")
        raise rule_error(key, (
            f"prefix caching shares blocks between requests, which policies.{index}'s "
            "contiguous KV regions (one per sequence) cannot; turn one of them off"))
    if arm.speculative is not None:
        raise rule_error(f"policies.{index}.speculative", (
            "speculative decoding is not modelled with contiguous KV allocation (its proposal "
            "slots would outgrow a region); use `kv_allocation: paged` for this arm"))
