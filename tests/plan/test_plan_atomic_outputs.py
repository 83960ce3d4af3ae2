"""`batchsim plan` writes its folder as `batchsim run` does (#18 items 6 and 7): under the
folder's lock, refused while another live run holds it, and its own files (plan.json,
plan.md, pareto.png, report.html) staged and moved in with plan.json last, so a write failure
leaves the previous plan or none, never a mix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from tests.atomic_checks import (
    fail_writing,
    file_stats,
    killed_mid_move,
    no_leftovers,
    refused_while_held,
)
from tests.cli_checks import fails_cleanly
from tests.plan.tiny import write_experiment

PLAN_FILES = ("plan.json", "plan.md", "pareto.png", "report.html")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Three bisection steps per arm: a handful of tenth-of-a-second runs.
    return write_experiment(tmp_path_factory.mktemp("exp"),
                            {"rate": {"low": 2, "high": 34, "tolerance": 16}})


@pytest.fixture(scope="module")
def reference(experiment: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete plan folder, written by a lone plan."""
    out = tmp_path_factory.mktemp("ref") / "plan"
    _plan_ok(experiment, out)
    return out


def _args(experiment: Path, out: Path) -> list[str]:
    return ["plan", str(experiment), "--out", str(out), "--jobs", "1"]


def _plan_ok(experiment: Path, out: Path) -> str:
    done = CliRunner().invoke(app, _args(experiment, out))
    assert done.exit_code == 0, done.output
    return done.output


def _plan_files(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in PLAN_FILES}


def test_a_plan_into_a_folder_another_live_run_holds_is_refused_before_running(
        experiment: Path, tmp_path: Path) -> None:
    refused_while_held(_args(experiment, tmp_path / "out"), tmp_path / "out")


@pytest.mark.parametrize("before", ["nothing", "a complete plan"])
def test_a_plan_write_failure_mid_way_leaves_the_previous_plan_or_none(
        experiment: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        before: str) -> None:
    out = tmp_path / "out"
    if before != "nothing":
        shutil.copytree(reference, out)
    previous = file_stats(out) if out.exists() else {}
    fail_writing(monkeypatch, "pareto.png")  # plan.json and plan.md are written by then
    fails_cleanly(_args(experiment, out), f"could not write {out / 'pareto.png'}",
                  "No space left on device")
    if before == "nothing":
        assert [name for name in PLAN_FILES if (out / name).exists()] == []
    else:
        assert file_stats(out) == previous  # not one file rewritten
    no_leftovers(out)
    monkeypatch.undo()
    output = _plan_ok(experiment, out)  # resumes: every run is read back
    assert "were already complete and were not run again" in output
    assert _plan_files(out) == _plan_files(reference)


@pytest.mark.slow  # the same path as the run's own test, which runs by default
def test_a_plan_over_a_previous_plan_writes_the_same_files_and_names_them_in_place(
        experiment: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    output = _plan_ok(experiment, out)
    assert output.count("wrote") == len(PLAN_FILES) and ".partial-" not in output
    assert file_stats(out).keys() == file_stats(reference).keys()
    assert _plan_files(out) == _plan_files(reference)
    no_leftovers(out)


@pytest.mark.slow  # the same path as the run's own test, which runs by default
def test_sigkill_while_moving_a_plan_in_leaves_no_plan_json_and_the_rerun_completes_it(
        experiment: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    killed_mid_move(_args(experiment, out))  # every run read back: the plan's files move first
    assert not (out / "plan.json").exists()  # went first: the folder does not look complete
    _plan_ok(experiment, out)  # the dead plan's lock and staging folder are taken over
    assert _plan_files(out) == _plan_files(reference)
    no_leftovers(out)
