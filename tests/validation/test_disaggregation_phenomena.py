"""Disaggregation trades TTFT for TPOT on prompt-heavy traffic (docs/design.md §10.4).

A 40-second `experiments/disaggregation.yaml`: six H100s, ~3,000-token prompts. Colocated
replicas stall their decodes for every prompt they prefill; a decode pool never does, so its
TPOT is lower, and the fewer GPUs prefill, the later the first token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import ArmResult, run_experiment

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "disaggregation.yaml"
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # Llama-3.1-8B in bf16: 128 KiB


@pytest.fixture(scope="module")
def arms() -> dict[str, ArmResult]:
    exp, base_dir = load_experiment(EXPERIMENT, ["workload.duration_s=40", "warmup_s=5"])
    return {arm.name: arm for arm in run_experiment(exp, base_dir).arms}


def _latency(arm: ArmResult, name: str, percentile: str) -> float:
    dist = arm.metrics[name]
    assert isinstance(dist, dict)
    return float(dist[percentile])


def test_every_arm_serves_every_request(arms: dict[str, ArmResult]) -> None:
    assert all(arm.requests["finished"].all() for arm in arms.values())


def test_a_decode_pool_has_a_lower_tpot_tail_than_colocated_replicas(
        arms: dict[str, ArmResult]) -> None:
    colocated = min(_latency(arms[name], "tpot_s", "p99") for name in ("continuous", "chunked"))
    for name in ("disagg-3p3d", "disagg-2p4d", "disagg-4p2d"):
        assert _latency(arms[name], "tpot_s", "p99") < colocated, name
    # No prefill ever stalls a decode pool: its inter-token tail is a few decode steps.
    assert _latency(arms["disagg-3p3d"], "itl_s", "p99") < _latency(
        arms["continuous"], "itl_s", "p99") / 3


def test_fewer_prefill_gpus_mean_a_later_first_token(arms: dict[str, ArmResult]) -> None:
    ttft = {name: _latency(arms[name], "ttft_s", "p50")
            for name in ("disagg-2p4d", "disagg-3p3d", "disagg-4p2d")}
    assert ttft["disagg-2p4d"] > ttft["disagg-3p3d"] > ttft["disagg-4p2d"]


def test_no_transfer_beats_its_bytes_over_the_whole_link(arms: dict[str, ArmResult]) -> None:
    requests = arms["disagg-3p3d"].requests
    moved = requests[requests["output_tokens"] > 1]
    alone = moved["prompt_tokens"] * KV_BYTES_PER_TOKEN / 50e9 + 10e-6
    assert (moved["kv_transfer_s"] >= alone * (1 - 1e-9)).all()
    assert np.isclose(moved["kv_transfer_s"], alone).mean() > 0.5  # most crossed alone
    assert 0.05 < arms["disagg-3p3d"].metrics["kv_link_utilization"] < 0.5  # type: ignore[operator]
