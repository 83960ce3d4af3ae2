"""docs/how-to/blackwell-fp4.md quotes what experiments/blackwell_fp4.yaml gives: each row of
its table is rebuilt here from the run of its grid point, and the readings it draws are
checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from tests.docs.deployment_rows import run_cells

REPO = Path(__file__).resolve().parents[2]
HOW_TO = (REPO / "docs" / "how-to" / "blackwell-fp4.md").read_text("utf-8")
POINTS = [(w, kv) for w in ("fp8", "nvfp4") for kv in ("fp8", "nvfp4")]


def point_metrics(weights: str, kv: str) -> dict[str, Any]:
    """One grid point of the shipped sweep, run alone (the same seed and traffic)."""
    exp, base_dir = load_experiment(REPO / "experiments" / "blackwell_fp4.yaml",
                                    ["sweep=null", f"dtype.weights={weights}",
                                     f"dtype.kv_cache={kv}"])
    return dict(run_experiment(exp, base_dir).arms[0].metrics)


def row(weights: str, kv: str, m: dict[str, Any]) -> str:
    return f"| {weights} | {kv} | {run_cells(m)}"


@pytest.mark.slow  # four points of a 70B model at 256 users: about 10 s on two cores
def test_the_table_is_what_the_experiment_gives() -> None:
    metrics = {point: point_metrics(*point) for point in POINTS}
    lines = HOW_TO.splitlines()
    for (weights, kv), m in metrics.items():
        assert row(weights, kv, m) in lines, row(weights, kv, m)
    tokens = {p: m["deployment"]["kv_tokens_per_replica"] for p, m in metrics.items()}
    out = {p: m["output_throughput_tps"] for p, m in metrics.items()}
    preempt = {p: m["preemptions_per_1000_requests"] for p, m in metrics.items()}
    # The readings: only fp8 on both preempts; FP4 weights gain more than an FP4 cache does.
    assert preempt[("fp8", "fp8")] > 0 and max(
        v for p, v in preempt.items() if p != ("fp8", "fp8")) == 0
    assert tokens[("fp8", "nvfp4")] > 1.7 * tokens[("fp8", "fp8")]
    assert out[("nvfp4", "fp8")] > 1.5 * out[("fp8", "fp8")]
    assert out[("fp8", "nvfp4")] < out[("nvfp4", "fp8")]
