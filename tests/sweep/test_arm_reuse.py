"""An arm is simulated once per distinct configuration it sees (#18 item 3): sweeping one arm's
knob does not simulate the other arms again at every value, and the files written are the
bytes that running every point whole writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.report.build import write_report
from batchsim.apps.sweep.arm_jobs import jobs_for
from batchsim.apps.sweep.outputs import write_sweep_summary
from batchsim.apps.sweep.points import parse_axis
from batchsim.apps.sweep.runs import plan_sweep, run_task, sweep_rows
from batchsim.experiment import runner
from batchsim.experiment.loader import load_experiment, validate_experiment
from batchsim.experiment.schema import Experiment

# The speculative arm sits between the two others: its draws are seeded by its index, so it
# must be simulated at index 1 even when the arm before it is not needed.
EXPERIMENT = {
    "name": "tiny-reuse", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "max_model_len": 2048,
    "workload": {"arrivals": {"kind": "poisson", "rate": 8.0},
                 "prompt_tokens": {"kind": "uniform", "low": 32, "high": 256},
                 "output_tokens": {"kind": "uniform", "low": 8, "high": 64},
                 "num_requests": 40},
    "policies": [
        {"name": "vllm", "kind": "continuous"},
        {"name": "spec", "kind": "continuous",
         "speculative": {"draft_model": "llama-3.1-8b", "num_speculative_tokens": 2,
                         "acceptance": {"kind": "beta", "mean": 0.7, "concentration": 4}}},
        {"name": "static", "kind": "static", "max_batch_size": 8},
    ],
}
VLLM_KNOB = "policies.vllm.max_num_seqs=8,32,128"


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT), encoding="utf-8")
    return path


@pytest.fixture
def simulated_arms(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every arm the runner simulates in this process, in order."""
    names: list[str] = []
    real = runner.run_experiment

    def counting(exp: Experiment, *args: Any, **kwargs: Any) -> runner.ExperimentResult:
        names.extend(arm.name for arm in exp.policies)
        return real(exp, *args, **kwargs)

    monkeypatch.setattr(runner, "run_experiment", counting)
    return names


def _sweep(experiment: Path, out: Path, *options: str) -> str:
    result = CliRunner().invoke(app, ["sweep", str(experiment), *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output


def test_sweeping_one_arms_knob_simulates_the_other_arms_once(
        experiment: Path, tmp_path: Path, simulated_arms: list[str]) -> None:
    output = _sweep(experiment, tmp_path / "out", "--param", VLLM_KNOB, "--jobs", "1")
    # Three points: vllm at each value, the two arms it does not touch once (not 3 x 3 = 9).
    assert sorted(simulated_arms) == ["spec", "static", "vllm", "vllm", "vllm"]
    assert "9 arm results (3 runs x 3 arms): 5 simulated, 4 reused" in output


def test_an_arm_whose_index_matters_is_simulated_in_its_place() -> None:
    arms = validate_experiment(EXPERIMENT, source="experiment").policies
    assert jobs_for([0, 1, 2], arms) == [(0, 1), (2,)]
    assert jobs_for([1], arms) == [(0, 1)]  # vllm comes along to keep spec at index 1
    assert jobs_for([0, 2], arms) == [(0,), (2,)]


def test_reused_arms_write_the_bytes_of_whole_point_runs(experiment: Path,
                                                          tmp_path: Path) -> None:
    """The whole sweep folder (point runs, summary, flat table, report and plots), in worker
    processes, against what running every point whole in this process writes."""
    spec_knob = "policies.spec.speculative.num_speculative_tokens=2,3"
    options = ["--param", "policies.vllm.max_num_seqs=8,64", "--param", spec_knob,
               "--replications", "2"]
    _sweep(experiment, tmp_path / "reused", *options, "--jobs", "2")
    whole = tmp_path / "whole"
    overrides = ["replications=2"]
    exp, _ = load_experiment(experiment, overrides)
    plan = plan_sweep(experiment, overrides, [parse_axis("policies.vllm.max_num_seqs=8,64"),
                                              parse_axis(spec_knob)], 2, whole)
    outcomes = [run_task(task) for task in plan.tasks]
    write_sweep_summary(whole, exp, plan, sweep_rows(plan, outcomes))
    write_report(whole)
    files = sorted(p.relative_to(whole) for p in whole.rglob("*") if p.is_file())
    assert sorted(p.relative_to(tmp_path / "reused") for p in (tmp_path / "reused").rglob("*")
                  if p.is_file()) == files
    assert len(files) > 8 * 3  # every run's three files, then the sweep's own
    for name in files:
        assert (tmp_path / "reused" / name).read_bytes() == (whole / name).read_bytes(), name
