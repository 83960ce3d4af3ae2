"""Prefix block ids of a trace's prompts (Mooncake's ``hash_ids``), kept for prefix caching.

Request i's prompt is a chain of fixed-size token blocks; two requests share a cached prefix
exactly as far as their leading block ids agree. The ids are ragged (one per block, so a long
prompt has many), so they are stored flat with offsets, as a CSR matrix stores its rows: the
ids of request i are ``ids[offsets[i]:offsets[i + 1]]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per prefix block in the Mooncake traces (FAST'25 release)."""


@dataclass(frozen=True, slots=True, eq=False)
class PrefixBlocks:
    """Block ids per request; ``eq=False`` because the fields are arrays."""

    ids: np.ndarray  # int64, every request's ids one after another
    offsets: np.ndarray  # int64, len = requests + 1, offsets[0] == 0, non-decreasing
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __post_init__(self) -> None:
        if self.offsets.ndim != 1 or self.offsets.size == 0 or self.offsets[0] != 0:
            raise ValueError("prefix block offsets must be 1-D and start at 0")
        if self.offsets[-1] != self.ids.size or np.any(np.diff(self.offsets) < 0):
            raise ValueError("prefix block offsets must be non-decreasing and end at len(ids)")

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def blocks_of(self, request: int) -> np.ndarray:
        """The block ids of one request's prompt, in prompt order."""
        return self.ids[self.offsets[request] : self.offsets[request + 1]]

    def counts(self) -> np.ndarray:
        """Number of blocks of each request."""
        return np.diff(self.offsets)

    def take(self, rows: np.ndarray) -> PrefixBlocks:
        """The block lists of ``rows`` (indices, in the order given), e.g. after sorting."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.counts()[rows]
        offsets = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # Position k of the output copies ids[start of its row + its rank within the row]:
        # repeat each row's (source start - destination start) shift over its blocks.
        shift = np.repeat(self.offsets[:-1][rows] - offsets[:-1], counts)
        return PrefixBlocks(self.ids[np.arange(offsets[-1]) + shift], offsets, self.block_tokens)

    @staticmethod
    def from_lists(lists: list[list[int]], block_tokens: int = MOONCAKE_BLOCK_TOKENS
                   ) -> PrefixBlocks:
        """From one list of ids per request."""
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum([len(ids) for ids in lists], out=offsets[1:])
        flat = np.fromiter((i for ids in lists for i in ids), dtype=np.int64, count=offsets[-1])
        return PrefixBlocks(flat, offsets, block_tokens)
