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


def pool_block_keys(ids: np.ndarray, block_tokens: int, pool_block_size: int,
                    prompt_tokens: int) -> tuple[int, ...]:
    """The prefix-cache key of each full KV block (of `pool_block_size` tokens) of a prompt.

    Trace ids are chained (an id names its block and everything before it), so the prefix
    ending at token e, inside trace block s, is named exactly by (ids[s], e): the key of pool
    block j, ending at e = (j + 1)·pool_block_size, packs that pair into one int. This holds for
    any two block sizes; only pool blocks that the ids cover and that end inside the prompt
    get a key (the trace's last block may be partial).
    """
    covered = min(ids.size * block_tokens, prompt_tokens)
    ends = np.arange(1, covered // pool_block_size + 1, dtype=np.int64) * pool_block_size
    owners = ids[(ends - 1) // block_tokens].tolist()
    return tuple((owner << 32) | end for owner, end in zip(owners, ends.tolist(), strict=True))
