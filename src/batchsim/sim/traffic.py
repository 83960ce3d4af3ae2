"""What arrives at the engine: open-loop requests, closed-loop users, or multi-turn sessions.

Workloads build these from plain arrays; the kernel reads prefix block ids and session turns
through the two protocols below, so it never imports the workloads that produce them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class PrefixBlockIds(Protocol):
    """Prompt block ids per request (a trace's ``hash_ids``), for prefix caching."""

    @property
    def block_tokens(self) -> int: ...

    def blocks_of(self, request: int) -> np.ndarray: ...


class SessionTurns(Protocol):
    """Multi-turn sessions: per turn its session, prompt and output tokens, and block ids."""

    @property
    def start_s(self) -> np.ndarray: ...

    @property
    def prompt_tokens(self) -> np.ndarray: ...

    @property
    def output_tokens(self) -> np.ndarray: ...

    @property
    def prefix_blocks(self) -> PrefixBlockIds: ...

    def turns_of(self, session: int) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class OpenLoopTraffic:
    """Requests with fixed arrival times (synthetic or from a trace)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    # Multi-tenant workloads: each request's tenant index and priority (None: all 0).
    tenant: np.ndarray | None = None
    priority: np.ndarray | None = None
    # Prompt block ids per request (Mooncake `hash_ids`, sessions), for prefix caching.
    prefix_blocks: PrefixBlockIds | None = None


@dataclass(frozen=True, slots=True)
class ClosedLoopTraffic:
    """`concurrency` users, each sending its next request when the previous one ends."""

    concurrency: int
    think_time_s: float
    lengths: Callable[[], Iterator[tuple[int, int]]]  # a fresh, deterministic stream per run
    num_requests: int | None
    duration_s: float | None
    # A client reusing a pool of distinct prompts: each request's pool entry, in send order,
    # drawn in step with `lengths` (None: every prompt is new). Requests of one entry share
    # their whole prompt, so a prefix cache can hit it.
    prompt_entries: Callable[[], Iterator[int]] | None = None
    # A benchmark's warm-up phase: once this many requests were sent, no user sends another
    # until every one of them has ended, so the measured phase starts as one wave.
    drain_after: int | None = None


@dataclass(frozen=True, slots=True)
class SessionTraffic:
    """Multi-turn sessions, each a closed loop: a turn is sent `think_time_s` after the
    previous turn of its session ended (built by `batchsim.workloads.sessions`)."""

    sessions: SessionTurns
    think_time_s: float
    num_requests: int | None
    duration_s: float | None


Traffic = OpenLoopTraffic | ClosedLoopTraffic | SessionTraffic
