"""An engine that keeps a slot of its max batch: each request waits for the next completion."""

from __future__ import annotations

import pytest

from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.measured import MeasuredCase
from batchsim.apps.replay.simulate import ReplayedCase, replay_case
from batchsim.experiment.engine_profile import load_engine_profile

USERS = 8
CLIENT = BenchmarkClient(requests_per_user=8, warmup_per_user=2)


def _replayed(engine: str, output: int) -> ReplayedCase:
    case = MeasuredCase("c", "x", engine, "meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "",
                        1, 1, 1024, output, USERS, 1.0, 1.0, engine_max_batch=USERS)
    replayed = replay_case(case, CLIENT, load_engine_profile(engine))
    assert isinstance(replayed, ReplayedCase)
    return replayed


def _wait_per_output(engine: str) -> tuple[float, float]:
    """How much longer TTFT is at 512 output tokens than at 128, and the time to the next
    completion that grows by: the decode time of a request over the other users' count."""
    short, long = _replayed(engine, 128), _replayed(engine, 512)
    next_completion = (512 * long.tpot_s - 128 * short.tpot_s) / (USERS - 1)
    return long.ttft_s - short.ttft_s, next_completion


def test_a_reserved_slot_makes_each_request_wait_for_the_next_completion() -> None:
    extra, next_completion = _wait_per_output("trtllm")
    assert extra == pytest.approx(next_completion, rel=0.25)


def test_with_a_slot_per_user_ttft_does_not_follow_the_output_length() -> None:
    extra, next_completion = _wait_per_output("vllm")
    assert abs(extra) < 0.1 * next_completion
