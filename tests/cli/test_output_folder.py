"""The output folder is resolved once (`~` expanded) and checked before anything is simulated."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from tests.cli_checks import fails_cleanly
from tests.validation.experiment_builder import base_experiment

RUN_FILES = {"summary.json", "requests.parquet", "timeseries.parquet", "report.html", "plots"}


def _experiment(tmp_path: Path, **overrides: object) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(base_experiment(**overrides)), encoding="utf-8")
    return path


@pytest.mark.parametrize("how", ["--out", "output.dir"])
def test_a_tilde_folder_gets_every_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        how: str) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    if how == "--out":
        args = ["run", str(_experiment(tmp_path)), "--out", "~/res"]
    else:
        args = ["run", str(_experiment(tmp_path, output={"dir": "~/res"}))]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert {p.name for p in (home / "res").iterdir()} == RUN_FILES
    assert not (work / "~").exists()


def test_an_existing_file_as_the_folder_fails_before_simulating(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a folder", encoding="utf-8")
    message = fails_cleanly(["run", str(_experiment(tmp_path)), "--out", str(taken)],
                            str(taken), "exists and is not a folder")
    assert "running" not in message
    assert taken.read_text(encoding="utf-8") == "not a folder"


def test_a_result_name_taken_by_a_folder_fails_before_simulating(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)
    fails_cleanly(["run", str(_experiment(tmp_path)), "--out", str(out)],
                  "summary.json exists and is not a file")
    assert [p.name for p in out.iterdir()] == ["summary.json"]  # nothing else written


def test_dev_null_is_not_a_folder(tmp_path: Path) -> None:
    fails_cleanly(["run", str(_experiment(tmp_path)), "--out", os.devnull],
                  "exists and is not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_parent_fails_before_simulating(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    fails_cleanly(["run", str(_experiment(tmp_path)), "--out", str(locked / "res")],
                  "is not a writable folder")


@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_sweep_and_plan_check_their_folder_too(tmp_path: Path, command: str) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x", encoding="utf-8")
    extra = {"sweep": [{"parameter": "seed", "values": [1, 2]}]} if command == "sweep" else {
        "plan": {"rate": {"low": 0.5, "high": 2.0, "tolerance": 0.5}}}
    fails_cleanly([command, str(_experiment(tmp_path, **extra)), "--out", str(taken)],
                  "exists and is not a folder")


def test_validate_rejects_the_output_folder_run_would(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x", encoding="utf-8")
    path = _experiment(tmp_path, output={"dir": str(taken)})
    for command in ("validate", "run"):
        fails_cleanly([command, str(path)], "exists and is not a folder")


def test_a_sweep_does_not_write_into_a_runs_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = _experiment(tmp_path)
    assert CliRunner().invoke(app, ["run", str(path), "--out", str(out)]).exit_code == 0
    before = (out / "summary.json").read_bytes()
    fails_cleanly(["sweep", str(path), "--param", "seed=1,2", "--out", str(out)],
                  "holds the results of a `batchsim run` (requests.parquet)")
    assert (out / "summary.json").read_bytes() == before
    assert not (out / "sweep.parquet").exists()


def test_a_run_does_not_write_into_a_sweeps_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = _experiment(tmp_path)
    done = CliRunner().invoke(app, ["sweep", str(path), "--param", "seed=1,2", "--out", str(out),
                                    "--jobs", "1"])
    assert done.exit_code == 0, done.output
    fails_cleanly(["run", str(path), "--out", str(out)],
                  "holds the results of a `batchsim sweep` (sweep.parquet)")
    assert not (out / "requests.parquet").exists()


def test_a_sweep_with_nothing_to_sweep_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fails_cleanly(["sweep", str(_experiment(tmp_path)), "--out", str(out)], "nothing to sweep")
    assert not out.exists()
