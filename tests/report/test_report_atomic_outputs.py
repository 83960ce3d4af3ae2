"""`batchsim report DIR` redraws a results folder's report under the folder's lock (refused
while another live run holds it) and atomically (#18 items 6 and 7): the page and plots/ are
drawn in a staging folder and moved in, plots/ whole and report.html last, so a reader never
sees a half-written page or a half-replaced plots/ folder, and a write failure leaves the
previous report."""

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
    held_by_another_process,
    killed_mid_move,
    no_leftovers,
)
from tests.cli_checks import fails_cleanly
from tests.validation.experiment_builder import base_experiment


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run's folder, report and plots included."""
    tmp_path = tmp_path_factory.mktemp("ref")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump(base_experiment()), encoding="utf-8")
    out = tmp_path / "run"
    done = CliRunner().invoke(app, ["run", str(experiment), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture
def results(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(reference, out)  # modification times kept
    return out


def test_a_report_of_a_folder_another_live_run_holds_is_refused(results: Path) -> None:
    previous = file_stats(results)
    with held_by_another_process(results) as pid:
        fails_cleanly(["report", str(results)], str(results), "in use by another batchsim run",
                      f"(pid {pid})")
    assert file_stats(results) == previous


def test_a_report_write_failure_mid_way_leaves_the_previous_report(
        results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    previous = file_stats(results)
    fail_writing(monkeypatch, "report.html")  # every plot is drawn and written by then
    fails_cleanly(["report", str(results)], f"could not write {results / 'report.html'}",
                  "No space left on device")
    assert file_stats(results) == previous  # the old page and its plots, untouched
    no_leftovers(results)


def test_a_report_replaces_the_page_and_plots_whole_with_the_same_bytes(
        results: Path, reference: Path) -> None:
    (results / "plots" / "stale.png").write_bytes(b"a plot no report draws")
    done = CliRunner().invoke(app, ["report", str(results)])
    assert done.exit_code == 0, done.output
    assert ".partial-" not in done.output
    assert {name: data for name, (data, _) in file_stats(results).items()} == {
        name: data for name, (data, _) in file_stats(reference).items()}
    no_leftovers(results)


@pytest.mark.slow  # the same path as the run's own test, which runs by default
def test_sigkill_while_moving_a_report_in_leaves_no_page_and_the_next_report_draws_it(
        results: Path, reference: Path) -> None:
    killed_mid_move(["report", str(results)])
    assert not (results / "report.html").exists()  # went first: no page beside other plots
    assert (results / "summary.json").exists()  # the results themselves are not touched
    done = CliRunner().invoke(app, ["report", str(results)])
    assert done.exit_code == 0, done.output
    assert {name: data for name, (data, _) in file_stats(results).items()} == {
        name: data for name, (data, _) in file_stats(reference).items()}
    no_leftovers(results)
