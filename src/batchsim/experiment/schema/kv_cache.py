"""The KV cache: block size, capacity, allocation layout, swap space, prefix caching and the
lower tiers."""

from typing import Literal

from pydantic import Field

from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, NonNegative
from batchsim.experiment.schema.kv_tiers import TierList, TierLoad

KVAllocation = Literal["paged", "contiguous"]


class KVCacheConfig(ConfigModel):
    """The KV cache."""

    block_size: AtLeastOne = 16
    """Tokens per KV block."""
    num_blocks: AtLeastOne | None = None
    """Blocks per replica; overrides the capacity computed from GPU memory (for what-if studies
    and tests). Null computes it."""
    allocation: KVAllocation = "paged"
    """How sequences get KV memory. `paged` (vLLM's PagedAttention): a block at a time as
    tokens arrive, from anywhere in the cache. `contiguous` (servers before paging): one region
    of consecutive blocks per sequence, reserved whole at admission for its prompt plus its
    most output (`contiguous_reserve`), placed first-fit and never moved, so free memory splits
    into holes and a sequence waits when no hole holds it. Arms may set their own
    (`policies[].kv_allocation`); `contiguous` applies to `continuous` and `chunked_prefill`
    arms, without prefix caching or speculative decoding. The summary's `kv_fragmentation`
    reports both kinds of waste (docs/how-to/kv-cache.md)."""
    contiguous_reserve: Literal["max_output", "max_model_len"] = "max_output"
    """What a contiguous region holds: `max_output`, the prompt plus the request's output
    length (which stands for the client's `max_tokens`, as `vllm bench serve` sends it), or
    `max_model_len` tokens for every sequence (a server that trusts no `max_tokens`)."""
    swap_space_gb: NonNegative = 4.0
    """Host memory per GPU, in GB, for swap preemption."""
    prefix_caching: bool = False
    """Keep full prompt blocks cached after their request leaves (reference counts, LRU
    eviction, vLLM v1's design) so that a request whose leading blocks are cached skips their
    prefill. Sharing between requests needs prefix block ids (a Mooncake trace or `sessions`
    arrivals); a request preempted by recompute finds its own computed blocks again without
    them. Applies to `continuous` and `chunked_prefill` arms."""
    tiers: TierList = Field(default_factory=list)
    """Lower KV tiers below the GPU's prefix cache, first (fastest) first, e.g.
    `[{kind: cpu, capacity_gb: 64, bandwidth_gb_s: 25}, {kind: disk, capacity_gb: 1000,
    bandwidth_gb_s: 5}]`. A cached block the GPU evicts moves to the first tier with any
    capacity, each tier's least recently used block to the next, out of the last for good; a
    prefix hit on a tier is loaded back (its bytes over the tier's bandwidth, added to the step
    that admits the request). Applies to the arms that cache prefixes (an arm's `kv_tiers`
    overrides it); empty: none (docs/how-to/tiered-kv.md)."""
    tier_load: TierLoad = "blocking"
    """How a step waits for its tier loads: `blocking`, the loads then the step's compute;
    `layerwise`, layer by layer, each layer computing once it is loaded (a two-stage pipeline
    over the model's layers: the longer of the two, plus one layer of the other)."""
