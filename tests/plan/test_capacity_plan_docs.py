"""The plan in docs/how-to/capacity-planning.md and the shipped experiments/capacity_plan.yaml
(reduced) plan, and give the answers the how-to describes."""

from __future__ import annotations

import re
from pathlib import Path

from batchsim.executors import InProcess
from batchsim.plan.planner import run_plan
from batchsim.plan.records import plan_document

REPO = Path(__file__).resolve().parents[2]
HOW_TO = REPO / "docs" / "how-to" / "capacity-planning.md"
SHIPPED = REPO / "experiments" / "capacity_plan.yaml"


def test_the_how_to_plan_runs_and_answers(tmp_path: Path) -> None:
    text = re.search(r"^```yaml\n(name:.*?)^```", HOW_TO.read_text("utf-8"),
                     re.MULTILINE | re.DOTALL)
    assert text is not None
    file = tmp_path / "plan.yaml"
    file.write_text(text.group(1), encoding="utf-8")
    document = plan_document(run_plan(file, [], tmp_path / "out", InProcess()), {})
    rates = document["answer"]["max_rate"]
    assert rates["base"]["vllm"] > rates["base"]["static"]
    assert rates["four-seqs"]["vllm"] < rates["base"]["vllm"]
    assert document["answer"]["cheapest"]["base"] == "vllm h100-sxm tp1 x1"
    ranked = document["variants"][0]["candidates"]["ranked"]
    assert {r["label"] for r in ranked if r["status"] == "does not fit"} == {
        f"{arm} h100-sxm tp3 x{n}" for arm in ("vllm", "static") for n in (1, 2)}


def test_the_shipped_capacity_plan_runs_reduced(tmp_path: Path) -> None:
    reduced = ["workload.duration_s=40", "warmup_s=10", "replications=1", "plan.what_if=[]",
               "plan.rate.tolerance=8", "plan.candidates.tensor_parallel=[1,4]",
               "plan.candidates.replicas=[2]", "plan.candidates.policies=[sarathi]"]
    document = plan_document(run_plan(SHIPPED, reduced, tmp_path, InProcess()), {})
    ranked = {r["label"]: r for r in document["variants"][0]["candidates"]["ranked"]}
    assert ranked["sarathi h100-sxm tp4 x2"]["status"] == "meets"
    assert ranked["sarathi h100-sxm tp4 x2"]["usd_per_hour"] == 24.0
    assert ranked["sarathi h100-sxm tp1 x2"]["status"] == "does not fit"
    for search in document["variants"][0]["max_rate"]:  # one TP4 replica: 2 < rate < 10
        assert search["status"] == "found" and 2 <= search["answer"] < 10
