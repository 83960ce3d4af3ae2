"""docs/how-to/moe.md ("Experts in a format of their own") quotes what
experiments/expert_formats.yaml gives and how the fused-MoE keys price MXFP4 experts: each row
of its table is rebuilt here from the run of its point, and the readings it draws are
checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.moe_cost import LayerStackCost
from batchsim.gpu.moe_layout import Parallelism
from tests.docs.deployment_rows import run_cells

REPO = Path(__file__).resolve().parents[2]
HOW_TO = (REPO / "docs" / "how-to" / "moe.md").read_text("utf-8")
WEIGHTS = ("bf16", "fp8", "mxfp4")


def point_metrics(weights: str) -> dict[str, Any]:
    """One point of the shipped sweep, run alone (the same seed and traffic)."""
    exp, base_dir = load_experiment(REPO / "experiments" / "expert_formats.yaml",
                                    ["sweep=null", f"dtype.weights={weights}"])
    return dict(run_experiment(exp, base_dir).arms[0].metrics)


def row(weights: str, m: dict[str, Any]) -> str:
    return f"| {weights} | {run_cells(m)}"


@pytest.mark.slow  # three 10-minute closed loops of 128 users: about 5 s on two cores
def test_the_table_is_what_the_experiment_gives() -> None:
    metrics = {weights: point_metrics(weights) for weights in WEIGHTS}
    lines = HOW_TO.splitlines()
    for weights, m in metrics.items():
        assert row(weights, m) in lines, row(weights, m)
    shipped, whole = metrics["bf16"], metrics["mxfp4"]
    room = (whole["deployment"]["kv_tokens_per_replica"]
            / shipped["deployment"]["kv_tokens_per_replica"])
    # The readings, each as the page words it.
    assert f"is {round(100 * (room - 1))}% more KV room" in " ".join(lines)
    assert all(m["preemptions_per_1000_requests"] > 0 for m in metrics.values())
    more = whole["output_throughput_tps"] / shipped["output_throughput_tps"]
    assert f"reports {round(100 * (more - 1))}% more output tokens" in " ".join(lines)
    assert round(whole["ttft_s"]["p50"] / shipped["ttft_s"]["p50"], 1) == 0.5  # "half"


def _linear_ms(gpu: str, experts: str | None, tokens: list[float]) -> np.ndarray:
    stack = LayerStackCost(load_model("gpt-oss-120b"), load_gpu_profile(gpu), Parallelism(1),
                           weight_dtype="bf16", imbalance=1.0, expert_dtype=experts)
    return 1e3 * stack.cost_many(np.array(tokens))[0]


def test_the_fitted_keys_price_mxfp4_experts_as_the_page_says() -> None:
    ends, between = [1.0, 8192.0], [8.0, 64.0, 512.0]
    assert np.all(_linear_ms("h200-sxm", "mxfp4", ends) > _linear_ms("h200-sxm", None, ends))
    ratio = _linear_ms("h200-sxm", "mxfp4", between) / _linear_ms("h200-sxm", None, between)
    assert np.all((ratio > 0.45) & (ratio < 0.65)), ratio  # "about half as costly"
    span = [1.0, 8.0, 64.0, 512.0]
    for gpu in ("h100-sxm", "b200"):
        assert np.all(_linear_ms(gpu, "mxfp4", span) < _linear_ms(gpu, None, span))
