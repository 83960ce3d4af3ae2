"""`plan.autoscaling`: fixed fleets and autoscaler bounds of a colocated arm on the file's own
traffic, each paid by the GPU-hours its replicas ran (an autoscaled pool's ∫ replicas dt over
the measured window), judged and ranked; bad axes fail in one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.executors import InProcess
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document
from batchsim.experiment.schema import PlanAutoscalingConfig
from tests.plan.tiny import EXPERIMENT, write_experiment

ARM = {"name": "vllm", "kind": "continuous", "max_num_seqs": 16,
       "autoscaler": {"interval_s": 0.5, "cold_start_s": 0.5, "scale_down_window_s": 1.0,
                      "target": 8}}
BUSY = {**EXPERIMENT["workload"], "arrivals": {"kind": "poisson", "rate": 30.0},
        "num_requests": 400}


def _replica_seconds(timeline: dict[str, list[float]], start: float, end: float) -> float:
    """∫ (serving + starting + draining) dt over [start, end], from the recorded changes."""
    t = np.array(timeline["t_s"])
    paid = sum(np.array(timeline[state], dtype=float)
               for state in ("serving", "starting", "draining"))
    edges = np.clip(np.append(t, np.inf), start, end)
    return float(np.sum(paid * np.diff(edges)))


def _plan(tmp_path: Path) -> dict[str, Any]:
    plan = {"autoscaling": {"fixed_replicas": [1, 3], "min_replicas": [1], "max_replicas": [2, 3]},
            "price_per_gpu_hour": {"h100-sxm": 2.0}}
    file = write_experiment(tmp_path, plan, policies=[ARM], workload=BUSY)
    assert CliRunner().invoke(app, ["validate", str(file)]).exit_code == 0
    return plan_document(run_plan(file, [], tmp_path / "plan", InProcess()), {})


def test_fleets_pay_for_the_replicas_they_ran(tmp_path: Path) -> None:
    document = _plan(tmp_path)
    fleets = document["variants"][0]["autoscaling"]
    rows = {row["label"]: row for row in fleets["ranked"]}
    assert sorted(rows) == ["vllm h100-sxm tp1 auto 1-2 target 8",
                            "vllm h100-sxm tp1 auto 1-3 target 8",
                            "vllm h100-sxm tp1 fixed x1", "vllm h100-sxm tp1 fixed x3"]
    warmup = EXPERIMENT["warmup_s"]
    for label, row in rows.items():
        summary = json.loads((tmp_path / "plan" / row["folder"] / "summary.json").read_text())
        (arm_row,) = summary["rows"]
        window = arm_row["metrics"]["window_s"]
        if row["kind"] == "fixed":
            replicas = int(label.rsplit("x", 1)[1])
            assert row["gpu_hours"] == pytest.approx(replicas * window / 3600)
            assert row["replicas_paid_mean"] == replicas
        else:
            timeline = arm_row["metrics"]["autoscaler"]["timeline"]
            seconds = _replica_seconds(timeline, warmup, warmup + window)
            assert row["gpu_hours"] == pytest.approx(seconds / 3600, rel=1e-9)
            assert row["replicas_paid_mean"] == pytest.approx(seconds / window, rel=1e-9)
            assert max(timeline["serving"]) > 1  # it did scale up under this load
        assert row["usd"] == pytest.approx(2.0 * row["gpu_hours"])
        assert 0.0 <= row["slo_attainment"] <= 1.0
    meeting = [row for row in fleets["ranked"] if row["status"] == "meets"]
    assert [row["usd"] for row in meeting] == sorted(row["usd"] for row in meeting)
    assert document["answer"]["autoscaling"]["base"] == fleets["ranked"][0]["label"]


@pytest.mark.parametrize(("axes", "key"), [
    ({"min_replicas": [3, 4], "max_replicas": [2]}, "min_replicas"),
    ({"fixed_replicas": [2, 2]}, "fixed_replicas"),
    ({"autoscaled": False}, "fixed_replicas"),
    ({"target": [0]}, "target.0"),
])
def test_bad_axes_are_refused(axes: dict, key: str) -> None:
    with pytest.raises(ValidationError, match=key):
        PlanAutoscalingConfig.model_validate(axes)


@pytest.mark.parametrize(("autoscaling", "policies", "message"), [
    ({"policies": ["split"]}, [ARM, {"name": "split", "kind": "disaggregated"}],
     "plan.autoscaling.policies: 'split' is disaggregated"),
    ({"policies": ["nope"]}, [ARM], "plan.autoscaling.policies: no arm named 'nope'"),
    ({"min_replicas": [5]}, [ARM], "plan.autoscaling: no min_replicas <= max_replicas pair"),
])
def test_validate_refuses_what_plan_would(tmp_path: Path, autoscaling: dict, policies: list,
                                          message: str) -> None:
    file = write_experiment(tmp_path, {"autoscaling": autoscaling}, policies=policies)
    done = CliRunner().invoke(app, ["validate", str(file)])
    assert done.exit_code != 0 and message in done.output
