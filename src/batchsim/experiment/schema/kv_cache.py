"""The paged KV cache: block size, capacity, swap space and prefix caching."""

from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, NonNegative


class KVCacheConfig(ConfigModel):
    """The paged KV cache."""

    block_size: AtLeastOne = 16
    """Tokens per KV block."""
    num_blocks: AtLeastOne | None = None
    """Blocks per replica; overrides the capacity computed from GPU memory (for what-if studies
    and tests). Null computes it."""
    swap_space_gb: NonNegative = 4.0
    """Host memory per GPU, in GB, for swap preemption."""
    prefix_caching: bool = False
    """Keep full prompt blocks cached after their request leaves (reference counts, LRU
    eviction, vLLM v1's design) so that a request whose leading blocks are cached skips their
    prefill. Sharing between requests needs prefix block ids (a Mooncake trace or `sessions`
    arrivals); a request preempted by recompute finds its own computed blocks again without
    them. Applies to `continuous` and `chunked_prefill` arms."""
