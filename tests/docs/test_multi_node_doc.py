"""docs/how-to/multi-node.md quotes what experiments/multi_node.yaml and the cost model give:
both tables are recomputed here, and the readings the page draws from them are checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.network import group_allreduce_seconds, group_span

REPO = Path(__file__).resolve().parents[2]
HOW_TO = (REPO / "docs" / "how-to" / "multi-node.md").read_text("utf-8")


def _measured_row(arm: str, m: dict[str, Any]) -> str:
    ttft, tpot = m["ttft_s"], m["tpot_s"]
    return (f"| {1e3 * ttft['p50']:,.0f} / {1e3 * ttft['p99']:,.0f} | "
            f"{1e3 * tpot['p50']:.1f} / {1e3 * tpot['p99']:.1f} | "
            f"{m['output_throughput_tps']:,.0f} | {m['slo_attainment']:.1%} |")


@pytest.mark.slow  # reason: eight arms of 1,200 DeepSeek-V3 requests, about 20 s
def test_the_measured_table_is_what_the_experiment_gives() -> None:
    exp, base_dir = load_experiment(REPO / "experiments" / "multi_node.yaml")
    result = run_experiment(exp, base_dir)
    rows = {line.split(" | ")[0].strip("| "): line for line in HOW_TO.splitlines()
            if line.startswith("| ") and " | " in line}
    m: dict[str, dict[str, Any]] = {arm.name: dict(arm.metrics) for arm in result.arms}
    for name, metrics in m.items():
        assert rows[name].endswith(_measured_row(name, metrics)), name
    tpot = {name: float(metrics["tpot_s"]["p50"]) for name, metrics in m.items()}
    slo = {name: float(metrics["slo_attainment"]) for name, metrics in m.items()}
    # TP16 over two nodes misses the SLO that two single-node TP8 replicas meet.
    assert slo["h200-2nodes-tp16"] < 0.1 < 0.99 < slo["h200-2x-tp8"]
    # DP attention with EP16 over two nodes beats two EP8 replicas on TPOT; the rack beats both.
    assert tpot["gb200-dp-ep16"] < tpot["h200-2nodes-dp-ep16"] < tpot["h200-2x-dp-ep8"]
    assert tpot["disagg-p8-d-dp-ep16"] < 0.75 * tpot["disagg-p8-d-dp-ep8"]


def _step(gpu: Any, layout: dict[str, Any], new: list[int], context: list[int]) -> str:
    cost = RooflineCostModel(load_model("deepseek-v3"), gpu, tensor_parallel=16,
                             weight_dtype="fp8", kv_dtype="bf16", **layout)
    step = cost.step_time(np.array(new), np.array(context), len(new))
    return f"{step.communication_s * 1e3:.{1 if len(new) == 1 else 2}f} / {step.seconds * 1e3:.1f}"


def test_the_step_table_is_the_cost_models() -> None:
    h200, gb200 = load_gpu_profile("h200-sxm"), load_gpu_profile("gb200")
    what_if = dataclasses.replace(h200, nvlink_domain_gpus=16)
    gpus = {"H200, 2 nodes": h200, "H200, one 16-GPU domain (what-if)": what_if,
            "GB200 NVL72": gb200}
    layouts = {"TP16": {}, "DP-attention EP16": {"expert_parallel": 16,
                                                 "data_parallel_attention": True}}
    lines = HOW_TO.splitlines()
    for layout_name, layout in layouts.items():
        for gpu_name, gpu in gpus.items():
            prefill = _step(gpu, layout, [8192], [0])
            decode = _step(gpu, layout, [1] * 64, [2000] * 64)
            assert f"| {layout_name} | {gpu_name} | {prefill} | {decode} |" in lines


def test_the_latency_caveat_quotes_the_formulas() -> None:
    gb300, h100 = load_gpu_profile("gb300"), load_gpu_profile("h100-sxm")
    inside = group_allreduce_seconds(0.0, group_span(gb300, 64), gpu=gb300, eff=gb300.efficiency)
    across = group_allreduce_seconds(0.0, group_span(h100, 64), gpu=h100, eff=h100.efficiency)
    assert f"= {inside * 1e6:.0f} µs" in HOW_TO
    assert f"9.6 µs: {across * 1e6:.0f} µs)" in HOW_TO
    assert inside > across
