"""Multi-turn sessions: each turn's prompt holds the conversation so far, its prefix block ids
extend the previous turn's, and a session sends its next turn only after the previous ended."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np

import batchsim.workloads as wl
from batchsim.workloads.sessions import (
    SESSION_BLOCK_TOKENS,
    Sessions,
    SessionShape,
    generate_sessions,
)
from tests.validation.experiment_builder import base_experiment, run_dict


def _sessions(system: int = 100) -> Sessions:
    shape = SessionShape(num_sessions=30, session_rate=2.0, turns=wl.GeometricLength(4.0),
                         user_tokens=wl.UniformLength(10, 200),
                         output_tokens=wl.UniformLength(1, 150), system_prompt_tokens=system,
                         max_model_len=4096)
    return generate_sessions(shape, np.random.default_rng(3))


def test_each_turn_contains_the_previous_turns_and_extends_their_block_ids() -> None:
    sessions = _sessions()
    blocks = sessions.prefix_blocks
    for session in range(sessions.start_s.size):
        turns = sessions.turns_of(session).tolist()
        for before, after in pairwise(turns):
            context = sessions.prompt_tokens[before] + sessions.output_tokens[before]
            assert sessions.prompt_tokens[after] > context  # plus a new user message
            full = sessions.prompt_tokens[before] // SESSION_BLOCK_TOKENS
            assert (blocks.blocks_of(after)[:full] == blocks.blocks_of(before)[:full]).all()


def test_system_prompt_blocks_are_shared_and_the_rest_are_not() -> None:
    sessions = _sessions(system=64)
    firsts = [sessions.turns_of(s)[0] for s in range(2)]
    a, b = (sessions.prefix_blocks.blocks_of(t) for t in firsts)
    assert (a[:4] == b[:4]).all() and not set(a[4:].tolist()) & set(b[4:].tolist())


def test_a_session_waits_for_each_answer_and_reuses_its_cached_context(tmp_path: Path) -> None:
    exp = base_experiment(
        kv_cache={"prefix_caching": True},
        workload={
            "arrivals": {"kind": "sessions", "num_sessions": 20, "session_rate": 1.0,
                         "turns": {"kind": "fixed", "value": 3}, "think_time_s": 0.5,
                         "system_prompt_tokens": 256},
            "prompt_tokens": {"kind": "fixed", "value": 100},
            "output_tokens": {"kind": "fixed", "value": 20},
            "duration_s": 1000.0,
        },
        policies=[{"name": "cp", "kind": "chunked_prefill", "token_budget": 512}],
    )
    arm = run_dict(tmp_path, exp).arms[0]
    requests = arm.requests.sort_values("arrival_s")
    assert len(requests) == 60 and requests["finished"].all()
    # Turn k of a session has prompt 256 + k*120 - 20 tokens: group the turns by length.
    first, later = requests[requests["prompt_tokens"] == 356], requests[
        requests["prompt_tokens"] > 356]
    assert (first["cached_tokens"] <= 256).all()
    # Every later turn was sent exactly the think time after some earlier turn finished.
    sent_after = (later["arrival_s"].to_numpy()[:, None]
                  - requests["finish_s"].to_numpy()[None, :])
    assert np.isclose(sent_after, 0.5, atol=1e-9).any(axis=1).all()
    assert (later["cached_tokens"] >= 256 + 100 - SESSION_BLOCK_TOKENS).all()
    cache = arm.metrics["prefix_cache"]
    assert isinstance(cache, dict) and cache["hit_rate_tokens"] > 0.5
