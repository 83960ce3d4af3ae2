"""`batchsim sweep` holds its folder's lock while it runs (a second sweep into it is refused
before running anything), and writes its own files (summary.json, sweep.parquet, report.html,
plots/) as one step, staged and moved in with summary.json last (#18 items 6 and 7): a write
failure leaves the previous sweep's files or none, the point folders complete, and the same
command resumes from them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
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
from tests.sweep.test_sweep_runs import EXPERIMENT

SWEEP_FILES = ("summary.json", "sweep.parquet", "report.html")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("exp") / "exp.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(experiment: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete sweep folder, written by a lone sweep."""
    out = tmp_path_factory.mktemp("ref") / "sweep"
    _sweep_ok(experiment, out)
    return out


def _args(experiment: Path, out: Path) -> list[str]:
    return ["sweep", str(experiment), "--param", "workload.arrivals.rate=2,16", "--jobs", "1",
            "--out", str(out)]


def _sweep_ok(experiment: Path, out: Path) -> str:
    done = CliRunner().invoke(app, _args(experiment, out))
    assert done.exit_code == 0, done.output
    return done.output


def _top_level(folder: Path) -> dict[str, bytes]:
    """The sweep's own files (not its point folders'), by name."""
    return {name: data for name, (data, _) in file_stats(folder).items()
            if not name.startswith("point-")}


def test_a_sweep_into_a_folder_another_live_run_holds_is_refused_before_running(
        experiment: Path, tmp_path: Path) -> None:
    refused_while_held(_args(experiment, tmp_path / "out"), tmp_path / "out")


@pytest.mark.parametrize("before", ["nothing", "a complete sweep"])
def test_a_sweep_write_failure_mid_way_leaves_the_previous_sweep_or_none(
        experiment: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        before: str) -> None:
    out = tmp_path / "out"
    if before != "nothing":
        shutil.copytree(reference, out)
    previous = file_stats(out) if out.exists() else {}
    # summary.json, sweep.parquet and the plots are written by then.
    fail_writing(monkeypatch, "report.html")
    fails_cleanly(_args(experiment, out), f"could not write {out / 'report.html'}",
                  "No space left on device")
    if before == "nothing":
        assert _top_level(out) == {}  # only the point folders, each complete
        assert len(list(out.glob("point-*/summary.json"))) == 2
    else:
        assert file_stats(out) == previous  # not one file rewritten
    no_leftovers(out)
    monkeypatch.undo()
    output = _sweep_ok(experiment, out)  # resumes: every point is read back
    assert "read back: 2 runs were already complete" in " ".join(output.split())
    assert _top_level(out) == _top_level(reference)


@pytest.mark.slow  # the same path as the run's own test, which runs by default
def test_a_sweep_over_a_previous_sweep_writes_the_same_files(
        experiment: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    (out / "plots" / "stale.png").write_bytes(b"a plot no report draws")
    output = _sweep_ok(experiment, out)
    assert ".partial-" not in output
    assert {name: data for name, (data, _) in file_stats(out).items()} == {
        name: data for name, (data, _) in file_stats(reference).items()}
    no_leftovers(out)


@pytest.mark.slow  # the same path as the run's own test, which runs by default
def test_sigkill_while_moving_a_sweep_in_leaves_no_summary_and_the_rerun_completes_it(
        experiment: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    killed_mid_move(_args(experiment, out))  # every point read back: the sweep's files move
    assert not (out / "summary.json").exists()  # went first: the folder does not look complete
    _sweep_ok(experiment, out)  # the dead sweep's lock and staging folder are taken over
    assert _top_level(out) == _top_level(reference)
    no_leftovers(out)
