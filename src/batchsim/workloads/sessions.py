"""Multi-turn sessions (docs/design.md §5): each turn's prompt is the whole conversation so far.

A session's token stream is a shared system prompt, then user message 1, answer 1, user
message 2, ... Turn k's prompt is the stream up to the end of user message k, its output is
answer k. The stream is cut into blocks of `block_tokens`, each named by an id that also names
everything before it (blocks inside the system prompt get ids shared by every session, later
blocks ids of their session), so turn k's prompt block ids extend turn k−1's and a prefix
cache finds the earlier turns' blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchsim.workloads.lengths import LengthDistribution
from batchsim.workloads.prefix_blocks import PrefixBlocks

SESSION_BLOCK_TOKENS = 16
"""Tokens per prefix block id of generated sessions (vLLM's default KV block size)."""


@dataclass(frozen=True, slots=True, eq=False)
class Sessions:
    """Turns of every session; row i of `turns` is turn `turn_index[i]` of `session[i]`."""

    start_s: np.ndarray  # when each session sends its first turn
    session: np.ndarray  # per turn, in session order then turn order
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_blocks: PrefixBlocks
    clipped: int  # sessions cut short because a turn would exceed max_model_len

    def turns_of(self, session: int) -> np.ndarray:
        """Row indices of one session's turns, in order."""
        return np.flatnonzero(self.session == session)


@dataclass(frozen=True, slots=True)
class SessionShape:
    num_sessions: int
    session_rate: float  # Poisson session starts per second
    turns: LengthDistribution  # turns per session
    user_tokens: LengthDistribution  # each user message
    output_tokens: LengthDistribution  # each answer
    system_prompt_tokens: int
    max_model_len: int


def generate_sessions(shape: SessionShape, rng: np.random.Generator) -> Sessions:
    n = shape.num_sessions
    start = np.cumsum(rng.exponential(1.0 / shape.session_rate, n))
    turns = shape.turns.sample(rng, n)
    sessions, prompts, outputs, ids = [], [], [], []
    clipped = 0
    for index in range(n):
        context = shape.system_prompt_tokens
        users = shape.user_tokens.sample(rng, int(turns[index])).tolist()
        answers = shape.output_tokens.sample(rng, int(turns[index])).tolist()
        for user, answer in zip(users, answers, strict=True):
            prompt = context + user
            if prompt + answer > shape.max_model_len:
                clipped += 1
                break
            sessions.append(index)
            prompts.append(prompt)
            outputs.append(answer)
            ids.append(_block_ids(index, prompt, shape.system_prompt_tokens))
            context = prompt + answer
    return Sessions(start, np.array(sessions, dtype=np.int64), np.array(prompts, dtype=np.int64),
                    np.array(outputs, dtype=np.int64),
                    PrefixBlocks.from_lists(ids, SESSION_BLOCK_TOKENS), clipped)


def _block_ids(session: int, prompt_tokens: int, system_tokens: int) -> list[int]:
    """Ids of the blocks covering a prompt: shared while a block lies inside the system
    prompt, then (session + 1, block) packed into one int (never equal to a shared id)."""
    shared = system_tokens // SESSION_BLOCK_TOKENS
    count = -(-prompt_tokens // SESSION_BLOCK_TOKENS)
    return [b if b < shared else ((session + 1) << 24) | b for b in range(count)]
