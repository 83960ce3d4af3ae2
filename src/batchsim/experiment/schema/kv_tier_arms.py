"""Which arms use lower KV tiers (`kv_cache.tiers`, an arm's `kv_tiers`), checked with the
file so that `validate` refuses what `run` would."""

from batchsim.experiment.schema.arms import Arm, ChunkedPrefillArm, ContinuousArm
from batchsim.experiment.schema.common import rule_error
from batchsim.experiment.schema.kv_cache import KVCacheConfig
from batchsim.experiment.schema.kv_tiers import KVTierConfig


def _caches_prefixes(arm: Arm, kv_cache: KVCacheConfig) -> bool:
    if not isinstance(arm, ContinuousArm | ChunkedPrefillArm):
        return False
    return kv_cache.prefix_caching if arm.prefix_caching is None else arm.prefix_caching


def arm_kv_tiers(arm: Arm, kv_cache: KVCacheConfig) -> list[KVTierConfig]:
    """The tiers below `arm`'s prefix cache: its own, else the experiment's; none for an arm
    that caches no prefixes (nothing would ever be offloaded)."""
    if not _caches_prefixes(arm, kv_cache):
        return []
    own = getattr(arm, "kv_tiers", None)
    return kv_cache.tiers if own is None else own


def check_kv_tiers(arms: list[Arm], kv_cache: KVCacheConfig) -> None:
    """Tiers need an arm that caches prefixes: an arm's own on it, the experiment's on one."""
    for index, arm in enumerate(arms):
        if getattr(arm, "kv_tiers", None) and not _caches_prefixes(arm, kv_cache):
            raise rule_error(f"policies.{index}.kv_tiers", (
                "lower KV tiers hold evicted prefix-cache blocks, and this arm caches no "
                "prefixes; set `prefix_caching: true` on it or drop its tiers"))
    if kv_cache.tiers and not any(_caches_prefixes(arm, kv_cache) for arm in arms):
        raise rule_error("kv_cache.tiers", (
            "lower KV tiers hold evicted prefix-cache blocks, and no arm caches prefixes; set "
            "`kv_cache.prefix_caching: true` (or an arm's `prefix_caching`) or drop the tiers"))
