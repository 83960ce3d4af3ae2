"""Known serving phenomena must reproduce (docs/design.md §10.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from tests.validation.experiment_builder import base_experiment, run_dict

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def _throughputs(result) -> dict[str, float]:
    return {arm.name: arm.metrics["output_throughput_tps"] for arm in result.arms}


def test_continuous_beats_static_on_the_ragged_quickstart() -> None:
    exp, base_dir = load_experiment(QUICKSTART)
    tps = _throughputs(run_experiment(exp, base_dir))
    assert tps["continuous"] >= 1.5 * tps["static-32"]


def test_continuous_and_static_are_close_on_uniform_lengths(tmp_path: Path) -> None:
    """Equal outputs and near-equal prompts leave static batching little padding to pay for."""
    exp = base_experiment(
        workload={
            "arrivals": {"kind": "closed_loop", "concurrency": 32},
            "prompt_tokens": {"kind": "uniform", "low": 384, "high": 640},
            "output_tokens": {"kind": "fixed", "value": 256},
            "num_requests": 1600,
        },
        policies=[
            {"name": "static", "kind": "static", "max_batch_size": 32, "max_output_tokens": 256},
            {"name": "continuous", "kind": "continuous", "max_num_seqs": 32},
        ],
        # The bare roofline: an engine's front end hands static batching each wave of
        # requests spread out, so its batches start part-full, a cost of its own.
        engine="none",
    )
    tps = _throughputs(run_dict(tmp_path, exp))
    assert tps["continuous"] == pytest.approx(tps["static"], rel=0.15)


def test_small_kv_cache_throughput_rises_then_falls_as_preemptions_climb(tmp_path: Path) -> None:
    """Past the concurrency the KV cache holds, recomputation eats the extra batching gain."""
    exp = base_experiment(
        seed=3,
        max_model_len=4096,
        kv_cache={"num_blocks": 3000},
        workload={
            "arrivals": {"kind": "closed_loop", "concurrency": 1},
            "prompt_tokens": {"kind": "uniform", "low": 256, "high": 512},
            "output_tokens": {"kind": "uniform", "low": 256, "high": 1024},
            "num_requests": 1000,
        },
    )
    points = {}
    for users in (16, 64, 128):
        arm = run_dict(tmp_path, exp, f"workload.arrivals.concurrency={users}").arms[0]
        points[users] = (arm.metrics["output_throughput_tps"], arm.metrics["preemptions"])
    (low, pre_low), (peak, pre_peak), (high, pre_high) = points.values()
    assert peak > 1.5 * low  # batching gain while the cache has room
    assert high < peak  # then the collapse
    assert pre_low == 0 < pre_peak < pre_high  # as preemptions climb
