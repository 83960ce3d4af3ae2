"""A request is a token account (docs/design.md §2): no prefill/decode phase, only computed
tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum


class RequestStatus(IntEnum):
    """Ordered so that `status >= FINISHED` means the request has ended."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    REJECTED = 4


@dataclass(slots=True, eq=False)
class Request:
    """One request's lengths, progress and timestamps (seconds of simulated time)."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # known to the simulator; a non-oracle policy must not read it
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV is in the cache
    num_generated: int = 0
    first_scheduled_s: float = math.nan
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    finish_s: float = math.nan
    preemptions: int = 0
    recomputed_tokens: int = 0
    dropped_tokens: int = 0  # computed tokens whose KV the last recompute preemption dropped
    swapped_out: bool = False  # KV blocks live in host memory while preempted by swap
    reject_reason: str = ""  # human-readable, reported per request
    reject_kind: str = ""  # a stable label for counting rejections by reason
    replica: int = 0
    tenant: int = 0  # index into workload.tenants (0 for a single-tenant workload)
    priority: int = 0  # the tenant's priority: lower is served first by `priority`
    # Prefix caching: the cache key of each full KV block, in order (those the workload
    # names, then, once preempted by recompute, keys of its own for the rest it computed;
    # empty: nothing cached), and the prompt tokens found cached when first admitted.
    prefix_keys: tuple[int, ...] = ()
    cached_tokens: int = 0
    # Lower KV tiers: of `cached_tokens`, those loaded from each tier (sim/kv_tiered_pool.py).
    tier_cached_tokens: tuple[int, ...] = ()
    # Static batching: decode steps this request's slot computed after it finished (padding,
    # set when its batch ends: metrics/padding.py); 0 under iteration-level policies.
    padding_slots: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt plus every token generated."""
        return self.prompt_tokens + self.num_generated

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED

    def reject(self, reason: str, kind: str = "unservable") -> None:
        """End the request without serving it; the reason is reported per request, and the
        kind (a short snake_case label, the same for every request rejected by one rule) is
        what the summary counts rejections by."""
        self.status = RequestStatus.REJECTED
        self.reject_reason = reason
        self.reject_kind = kind
