"""Sweeps end to end: rows per point and arm, resumption, replications, executors agree."""

from __future__ import annotations

import importlib.util
import json
from importlib.resources import files
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.executors import InProcess, LocalProcesses
from batchsim.apps.sweep.points import SweepAxis
from batchsim.apps.sweep.runs import plan_sweep, replication_seeds, run_sweep

EXPERIMENT = {
    "name": "tiny-sweep", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "max_model_len": 2048,
    "workload": {"arrivals": {"kind": "poisson", "rate": 4.0},
                 "prompt_tokens": {"kind": "uniform", "low": 32, "high": 256},
                 "output_tokens": {"kind": "uniform", "low": 8, "high": 64},
                 "num_requests": 60},
    "policies": [{"name": "vllm", "kind": "continuous"},
                 {"name": "static", "kind": "static", "max_batch_size": 8}],
}


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT), encoding="utf-8")
    return path


def _plan(experiment: Path, out: Path, replications: int = 1):
    axes = [SweepAxis("workload.arrivals.rate", (2.0, 16.0))]
    return plan_sweep(experiment, [f"replications={replications}"], axes, replications, out)


def test_one_row_per_point_and_arm_with_the_point_values(experiment: Path,
                                                         tmp_path: Path) -> None:
    rows = run_sweep(_plan(experiment, tmp_path / "out"), InProcess())
    assert [(r["point"]["workload.arrivals.rate"], r["arm"]) for r in rows] == [
        (2.0, "vllm"), (2.0, "static"), (16.0, "vllm"), (16.0, "static")]
    low, high = (rows[i]["metrics"]["request_throughput_rps"] for i in (0, 2))
    assert high > 2 * low  # the swept rate reached the runs
    assert all(r["ci95"] is None for r in rows)


def test_completed_points_are_not_run_again(experiment: Path, tmp_path: Path) -> None:
    plan = _plan(experiment, tmp_path / "out")
    first = run_sweep(plan, InProcess())
    skipped: list[bool] = []
    again = run_sweep(plan, InProcess(), on_done=lambda task, outcome: skipped.append(
        outcome.skipped))
    assert skipped == [True, True] and again == first
    # A point whose results no longer match its configuration runs again.
    summary = Path(plan.tasks[1].out_dir) / "summary.json"
    document = json.loads(summary.read_text())
    document["config"]["seed"] = 99
    summary.write_text(json.dumps(document))
    skipped.clear()
    assert run_sweep(plan, InProcess(), on_done=lambda task, outcome: skipped.append(
        outcome.skipped)) == first
    assert skipped == [True, False]


def test_points_run_again_when_a_file_they_read_changed(tmp_path: Path) -> None:
    """Recalibrating a profile (or editing a trace) changes no configuration key, but the
    results on disk were computed from the old file: those points must run again."""
    shipped = Path(str(files("batchsim.hardware_profiles"))) / "gpus" / "h100-sxm.yaml"
    profile = tmp_path / "my-gpu.yaml"
    profile.write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / "exp.yaml"
    # The edit below is to the GPU profile's step overhead, which an engine's would replace.
    path.write_text(yaml.safe_dump({**EXPERIMENT, "hardware": "my-gpu.yaml", "engine": "none"}),
                    encoding="utf-8")
    plan = _plan(path, tmp_path / "out")
    first = run_sweep(plan, InProcess())
    skipped: list[bool] = []
    run_sweep(plan, InProcess(), on_done=lambda task, outcome: skipped.append(outcome.skipped))
    assert skipped == [True, True]
    text = profile.read_text(encoding="utf-8")
    profile.write_text(text.replace("step_overhead_s: 2.000e-04", "step_overhead_s: 4.000e-04"),
                       encoding="utf-8")
    skipped.clear()
    again = run_sweep(plan, InProcess(), on_done=lambda task, outcome: skipped.append(
        outcome.skipped))
    assert skipped == [False, False]
    assert again[0]["metrics"]["e2e_s"] != first[0]["metrics"]["e2e_s"]


def test_replications_use_independent_seeds_and_give_intervals(experiment: Path,
                                                               tmp_path: Path) -> None:
    seeds = replication_seeds(3, 3)
    assert len(set(seeds)) == 3 and seeds == replication_seeds(3, 3)
    rows = run_sweep(_plan(experiment, tmp_path / "out", replications=3), InProcess())
    row = rows[0]
    assert row["replications"] == 3 and row["seeds"] == seeds
    low, high = row["ci95"]["ttft_s"]["p99"]
    assert low < row["metrics"]["ttft_s"]["p99"] < high


def test_worker_processes_give_the_same_rows(experiment: Path, tmp_path: Path) -> None:
    serial = run_sweep(_plan(experiment, tmp_path / "a"), InProcess())
    parallel = run_sweep(_plan(experiment, tmp_path / "b"), LocalProcesses(2))
    assert parallel == serial


def test_cli_sweep_writes_summary_and_flat_table(experiment: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["sweep", str(experiment), "--param",
                                      "workload.arrivals.rate=2,16", "--replications", "2",
                                      "--jobs", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "summary.json").read_text())
    assert document["sweep"]["points"] == 2 and document["sweep"]["replications"] == 2
    table = pd.read_parquet(out / "sweep.parquet")
    assert len(table) == 4
    assert {"point.workload.arrivals.rate", "ttft_s.p99", "ttft_s.p99.ci95_low"} <= set(table)


def test_cli_rejects_a_bad_swept_value_before_running(experiment: Path,
                                                      tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep", str(experiment), "--param",
                                      "workload.arrivals.rate=2,-1", "--out",
                                      str(tmp_path / "bad")])
    assert result.exit_code == 2
    assert "workload.arrivals.rate" in result.output
    assert not (tmp_path / "bad").exists()


def test_an_interrupted_sweep_reruns_only_its_missing_points(experiment: Path,
                                                              tmp_path: Path) -> None:
    plan = _plan(experiment, tmp_path / "out")
    first = run_sweep(plan, InProcess())
    # As a kill leaves it: one point never written, another half-written.
    (Path(plan.tasks[0].out_dir) / "summary.json").unlink()
    (Path(plan.tasks[1].out_dir) / "summary.json").write_text('{"config": {"na')
    ran: list[str] = []
    again = run_sweep(plan, InProcess(), on_done=lambda task, outcome: ran.append(
        task.out_dir) if not outcome.skipped else None)
    assert sorted(ran) == sorted(task.out_dir for task in plan.tasks) and again == first


@pytest.mark.slow  # by default tests/plan/test_plan_runs.py checks that executors agree
def test_summaries_are_byte_identical_whichever_executor_ran_them(experiment: Path,
                                                                  tmp_path: Path) -> None:
    executors = [["--jobs", "1"], ["--jobs", "2"]]
    if importlib.util.find_spec("ray") is not None:  # the dev extra installs Ray
        executors.append(["--executor", "ray"])
    texts = []
    for index, options in enumerate(executors):
        out = tmp_path / f"run-{index}"
        result = CliRunner().invoke(app, ["sweep", str(experiment), "--param",
                                          "workload.arrivals.rate=2,16", "--replications", "2",
                                          *options, "--out", str(out)])
        assert result.exit_code == 0, result.output
        texts.append((out / "summary.json").read_bytes())
    assert all(text == texts[0] for text in texts[1:])
