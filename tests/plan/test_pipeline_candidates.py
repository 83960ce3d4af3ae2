"""`plan.candidates.pipeline_parallel`: stage counts tried next to tensor parallelism, each
counted as TP × PP GPUs per replica, and a count that cannot split the layers does not fit."""

from __future__ import annotations

from pathlib import Path

from batchsim.apps.executors import InProcess
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document
from tests.plan.tiny import write_experiment


def test_pipeline_candidates_are_tried_counted_and_judged(tmp_path: Path) -> None:
    plan = {"target_rate": 4, "candidates": {"tensor_parallel": [1, 2],
                                              "pipeline_parallel": [1, 2, 3],
                                              "policies": ["vllm"]}}
    file = write_experiment(tmp_path, plan)
    document = plan_document(run_plan(file, [], tmp_path / "plan", InProcess()), {})
    ranked = {row["label"]: row for row in document["variants"][0]["candidates"]["ranked"]}
    assert set(ranked) == {f"vllm h100-sxm tp{tp}pp{pp} x1" for tp in (1, 2) for pp in (1, 2, 3)}
    for tp in (1, 2):
        for pp in (1, 2):
            row = ranked[f"vllm h100-sxm tp{tp}pp{pp} x1"]
            assert row["gpus"] == tp * pp
            assert row["pipeline_parallel"] == pp
        # Llama-3.1-8B's 32 layers do not split into 3 stages.
        misfit = ranked[f"vllm h100-sxm tp{tp}pp3 x1"]
        assert misfit["status"] == "does not fit"
        assert "32 layers, which pipeline_parallel=3 does not divide" in misfit["reasons"][0]
    # At this light load every layout that fits meets the SLO; the fewest GPUs wins.
    assert document["answer"]["cheapest"]["base"] == "vllm h100-sxm tp1pp1 x1"
