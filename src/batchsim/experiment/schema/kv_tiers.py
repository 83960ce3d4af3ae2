"""Lower KV tiers below the GPU's prefix cache (`kv_cache.tiers`, an arm's `kv_tiers`;
docs/how-to/tiered-kv.md)."""

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from batchsim.experiment.schema.common import ConfigModel, NonNegative, Positive

TierKind = Literal["cpu", "disk", "remote"]
TierLoad = Literal["blocking", "layerwise"]


class KVTierConfig(ConfigModel):
    """One tier: where evicted prefix blocks go, and where prefix hits may be loaded from."""

    kind: TierKind
    """What the tier is: `cpu` (host memory), `disk` (local SSD) or `remote` (a KV store over
    the network). A label, but for swap: a first tier of kind `cpu` also holds the blocks that
    preemption by swap moves off the GPU, in place of `kv_cache.swap_space_gb`."""
    capacity_gb: NonNegative
    """Its size per GPU, in GB (10^9 bytes): it holds as many blocks as whole KV blocks (of
    one GPU's share) fit in it. 0 holds nothing: the tier changes no output."""
    bandwidth_gb_s: Positive | None = None
    """Load bandwidth onto the GPU, per GPU, in GB/s: a block loaded from this tier costs its
    bytes over this. Null is infinite bandwidth (a load costs nothing)."""


def _distinct_kinds(tiers: list[KVTierConfig] | None) -> list[KVTierConfig] | None:
    """Each kind at most once: the metrics and columns are named by kind."""
    kinds = [tier.kind for tier in tiers or ()]
    for kind in kinds:
        if kinds.count(kind) > 1:
            raise ValueError(f"the tier kind {kind!r} appears {kinds.count(kind)} times; "
                             "give each kind once")
    return tiers


TierList = Annotated[list[KVTierConfig], AfterValidator(_distinct_kinds)]
ArmKVTiers = Annotated[list[KVTierConfig] | None, AfterValidator(_distinct_kinds), Field(
    description=(
        "Lower KV tiers for this arm, first (fastest) first; null follows `kv_cache.tiers` "
        "(so one experiment compares tiers on the same traffic). Needs prefix caching on the "
        "arm (docs/how-to/tiered-kv.md)."))]
