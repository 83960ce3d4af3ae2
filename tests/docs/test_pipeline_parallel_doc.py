"""docs/how-to/pipeline-parallel.md quotes what experiments/pp_vs_tp.yaml and the cost model
give: every number in its two tables and its prose is recomputed here, and the readings it
draws from them are checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from batchsim.gpu.cost_model import StepCost
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.pipeline_cost import PipelineStepCost, build_cost_model

REPO = Path(__file__).resolve().parents[2]
HOW_TO = (REPO / "docs" / "how-to" / "pipeline-parallel.md").read_text("utf-8")
LAYOUTS = {"tp8": "1 × TP8", "tp4-pp2": "1 × TP4 × PP2", "tp2-pp4": "1 × TP2 × PP4",
           "2x-tp4": "2 × TP4", "2x-tp2-pp2": "2 × TP2 × PP2"}


def _row(arm: str, m: dict[str, object]) -> str:
    ttft, tpot, layout = m["ttft_s"], m["tpot_s"], m["deployment"]
    assert isinstance(ttft, dict) and isinstance(tpot, dict) and isinstance(layout, dict)
    return (f"| {arm} | {LAYOUTS[arm]} | {m['request_throughput_rps']:.2f} | "
            f"{m['output_throughput_tps']:,.0f} | "
            f"{1e3 * ttft['p50']:,.0f} / {1e3 * ttft['p99']:,.0f} ms | "
            f"{1e3 * tpot['p50']:,.1f} / {1e3 * tpot['p99']:,.1f} ms | "
            f"{m['slo_attainment']:.1%} | {layout['kv_tokens_per_replica']:,} |")


def test_the_measured_table_is_what_the_experiment_gives() -> None:
    exp, base_dir = load_experiment(REPO / "experiments" / "pp_vs_tp.yaml")
    result = run_experiment(exp, base_dir)
    lines = HOW_TO.splitlines()
    for arm in result.arms:
        assert _row(arm.name, arm.metrics) in lines, arm.name
    m = {arm.name: arm.metrics for arm in result.arms}
    ttft = {name: metrics["ttft_s"]["p50"] for name, metrics in m.items()}  # type: ignore[index]
    tpot = {name: metrics["tpot_s"]["p50"] for name, metrics in m.items()}  # type: ignore[index]
    slo = {name: metrics["slo_attainment"] for name, metrics in m.items()}
    # The how-to's reading: the deepest pipeline has the slowest tokens and misses the SLO.
    assert tpot["tp2-pp4"] > 4 * tpot["tp8"]
    assert slo["tp2-pp4"] < 0.5  # type: ignore[operator]
    # TTFT and TPOT rise with P, and on this node every pipeline loses to the tensor-parallel
    # layout of the same replica count (TP8 alone, or 2 × TP4).
    assert ttft["tp8"] < ttft["tp4-pp2"] < ttft["tp2-pp4"]
    assert tpot["tp8"] < tpot["tp4-pp2"] < tpot["tp2-pp4"]
    for tp_arm, pp_arms in (("tp8", ("tp4-pp2", "tp2-pp4")), ("2x-tp4", ("2x-tp2-pp2",))):
        for pp_arm in pp_arms:
            assert ttft[tp_arm] < ttft[pp_arm] and tpot[tp_arm] < tpot[pp_arm], pp_arm
            assert slo[tp_arm] >= slo[pp_arm], pp_arm  # type: ignore[operator]


def test_the_step_costs_quoted_are_the_cost_models() -> None:
    model, gpu = load_model("llama-3.1-70b"), load_gpu_profile("a100-sxm-80gb")
    decode = (np.ones(32, dtype=np.int64), np.full(32, 1500), 32)
    prefill = (np.full(8, 1500), np.zeros(8, dtype=np.int64), 8)
    costs = {}
    for tp, pp, name in ((8, 1, "TP8"), (4, 2, "TP4 × PP2"), (2, 4, "TP2 × PP4")):
        costs[name] = cost = build_cost_model(model, gpu, tensor_parallel=tp,
                                              pipeline_parallel=pp, weight_dtype="bf16",
                                              kv_dtype="bf16")
        row = (f"| {name} | {1e3 * cost.step_time(*decode).seconds:,.1f} ms | "
               f"{1e3 * cost.step_time(*prefill).seconds:,.1f} ms |")
        assert row in HOW_TO.splitlines(), row
    flat = " ".join(HOW_TO.split())
    tp8_decode, tp8_prefill = costs["TP8"].step_time(*decode), costs["TP8"].step_time(*prefill)
    assert isinstance(tp8_decode, StepCost) and isinstance(tp8_prefill, StepCost)
    assert (f"({1e3 * tp8_decode.communication_s:.1f} ms of TP8's "
            f"{1e3 * tp8_decode.seconds:.1f} ms step)") in flat
    share = tp8_prefill.communication_s / tp8_prefill.seconds
    assert (f"cost about {tp8_prefill.communication_s:.2f} s of its "
            f"{tp8_prefill.seconds:.2f} s ({share:.0%})") in flat
    saved = {name: 1 - costs[name].step_time(*prefill).seconds / tp8_prefill.seconds
             for name in ("TP4 × PP2", "TP2 × PP4")}
    assert (f"TP2 × PP4 prefills in {saved['TP2 × PP4']:.0%} less time than TP8 "
            f"(TP4 × PP2 in {saved['TP4 × PP2']:.0%} less)") in flat
    # "a modest win, smaller than the all-reduce share it saves"
    assert 0 < saved["TP4 × PP2"] < saved["TP2 × PP4"] < share
    lone = costs["TP2 × PP4"].step_time(np.ones(1, dtype=np.int64), np.full(1, 1500), 1)
    assert isinstance(lone, PipelineStepCost)
    assert f"TP2 × PP4 leaves {lone.bubble_fraction:.0%} of the stages' time idle" in flat


def test_the_prefill_heavy_variant_is_what_the_experiment_gives() -> None:
    sets = ["workload.prompt_tokens.mean=6000", "workload.output_tokens.mean=16",
            "workload.arrivals.rate=1.5"]
    flat = " ".join(HOW_TO.split())
    for key in sets:
        assert f"--set {key}" in flat, key
    exp, base_dir = load_experiment(REPO / "experiments" / "pp_vs_tp.yaml", sets)
    m = {arm.name: arm.metrics for arm in run_experiment(exp, base_dir).arms}
    p50 = {name: metrics["ttft_s"]["p50"] for name, metrics in m.items()}  # type: ignore[index]
    quoted = (f"TTFT p50 is {p50['tp8']:.1f} s on TP8, {p50['tp4-pp2']:.1f} s on TP4 × PP2 and "
              f"{p50['tp2-pp4']:.0f} s on TP2 ×")
    assert quoted in flat, quoted
    assert f"({m['tp2-pp4']['request_throughput_rps']:.2f} req/s)" in HOW_TO
    # More prefill does not rescue the pipelines, and TP2 × PP4 falls behind the 1.5 req/s.
    assert p50["tp8"] < p50["tp4-pp2"] < p50["tp2-pp4"]
    assert m["tp2-pp4"]["request_throughput_rps"] < 0.9 * 1.5  # type: ignore[operator]
