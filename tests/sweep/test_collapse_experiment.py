"""The shipped collapse sweep shows the KV-cache knee (a reduced run of it)."""

from __future__ import annotations

from pathlib import Path

from batchsim.apps.executors import InProcess
from batchsim.apps.sweep.cli import sweep_axes
from batchsim.apps.sweep.points import SweepAxis
from batchsim.apps.sweep.runs import plan_sweep, run_sweep
from batchsim.experiment.loader import load_experiment

COLLAPSE = Path(__file__).resolve().parents[2] / "experiments" / "collapse.yaml"


def test_the_shipped_sweep_plans_every_point_and_replication(tmp_path: Path) -> None:
    exp, _ = load_experiment(COLLAPSE)
    plan = plan_sweep(COLLAPSE, [], sweep_axes(exp, []), exp.replications, tmp_path)
    assert len(plan.tasks) == len(plan.points) * exp.replications == 7 * 2


def test_throughput_rises_then_falls_as_preemptions_climb(tmp_path: Path) -> None:
    overrides = ["sweep=null", "replications=1", "workload.num_requests=500"]
    axes = [SweepAxis("workload.arrivals.concurrency", (16, 64, 128))]
    rows = run_sweep(plan_sweep(COLLAPSE, overrides, axes, 1, tmp_path), InProcess())
    recompute = [row["metrics"] for row in rows if row["arm"] == "recompute"]
    low, knee, high = (m["output_throughput_tps"] for m in recompute)
    assert knee > 1.5 * low and high < knee
    preemptions = [m["preemptions_per_1000_requests"] for m in recompute]
    assert preemptions[0] == 0 < preemptions[1] < preemptions[2]
    reserve = [row["metrics"] for row in rows if row["arm"] == "reserve"]
    assert reserve[2]["preemptions_per_1000_requests"] < preemptions[2] / 10
