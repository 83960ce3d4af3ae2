"""A results folder is written whole or not at all (#18 items 6 and 7): under a lock that
refuses a second live run, through a staging folder, summary.json moved into place last.

Every test ends with one of two states of the folder: complete and consistent (byte for byte
one seed's results) or not looking complete (no summary.json), never a mix.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.experiment.output_folder import lock_path
from tests.atomic_checks import HOLD, KILLED_MID_MOVE, held_by_another_process, no_leftovers
from tests.cli_checks import fails_cleanly
from tests.validation.experiment_builder import base_experiment

CLI = "import sys; from batchsim.apps.cli import app; app(sys.argv[1:])"

Snapshot = dict[str, bytes]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exp = base_experiment()
    exp["policies"].append({"name": "static", "kind": "static", "max_batch_size": 8})
    path = tmp_path_factory.mktemp("exp") / "exp.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(experiment: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """A lone run's folder for seeds 1 and 2: what a complete folder holds, byte for byte."""
    folders = {}
    for seed in (1, 2):
        folder = tmp_path_factory.mktemp("ref") / f"seed{seed}"
        _run_ok(experiment, folder, seed)
        folders[seed] = folder
    return folders


def _run_ok(experiment: Path, out: Path, seed: int) -> None:
    done = CliRunner().invoke(app, _args(experiment, out, seed))
    assert done.exit_code == 0, done.output


def _args(experiment: Path, out: Path, seed: int) -> list[str]:
    return ["run", str(experiment), "--out", str(out), "--set", f"seed={seed}"]


def _snapshot(folder: Path) -> Snapshot:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _copy(source: Path, dest: Path) -> None:
    for name, data in _snapshot(source).items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)


def _assert_complete_or_not_looking_so(folder: Path, reference: dict[int, Path]) -> None:
    """summary.json there: the folder is exactly one seed's results, every parquet readable."""
    if not (folder / "summary.json").exists():
        return
    seed = json.loads((folder / "summary.json").read_text(encoding="utf-8"))["config"]["seed"]
    assert _snapshot(folder) == _snapshot(reference[seed])
    for name in ("requests.parquet", "timeseries.parquet"):
        assert len(pd.read_parquet(folder / name)) > 0


def _cli(*args: str, script: str = CLI) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A folder whose lock another live process holds."""
    out = tmp_path / "out"
    with held_by_another_process(out) as pid:
        yield out, pid


def test_a_folder_another_live_run_holds_is_refused_before_simulating(
        experiment: Path, reference: dict[int, Path], held: tuple[Path, int]) -> None:
    out, pid = held
    out.mkdir()
    _copy(reference[1], out)
    done = CliRunner().invoke(app, _args(experiment, out, 2))
    assert done.exit_code == 2, done.output
    assert "running" not in done.stdout  # refused before simulating
    message = done.stderr.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in done.output, message
    for text in (str(out), "in use by another batchsim run", f"(pid {pid})"):
        assert text in message, message
    assert _snapshot(out) == _snapshot(reference[1])


def test_the_folder_is_free_again_once_its_holder_lets_go(
        experiment: Path, reference: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = _cli(str(out), script=HOLD)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.communicate(timeout=30)
    _run_ok(experiment, out, 2)
    assert _snapshot(out) == _snapshot(reference[2])
    no_leftovers(out)


def test_a_lock_left_by_a_dead_process_is_taken_over(
        experiment: Path, reference: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock_path(out).write_text(f"{dead.pid}\n", encoding="utf-8")
    _run_ok(experiment, out, 1)
    assert _snapshot(out) == _snapshot(reference[1])
    no_leftovers(out)


def test_two_concurrent_runs_into_one_folder_leave_one_complete_folder(
        experiment: Path, reference: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = [_cli(*_args(experiment, out, seed)) for seed in (1, 2)]
    ended = [(run.wait(timeout=300), run.communicate()[1]) for run in runs]
    assert 0 in [code for code, _ in ended], ended
    for code, stderr in ended:
        if code != 0:  # the loser: refused in one line (if they overlapped; else both win)
            assert code == 2 and "in use by another batchsim run" in stderr, stderr
            assert len(stderr.strip().splitlines()) == 1, stderr
    assert (out / "summary.json").exists()
    _assert_complete_or_not_looking_so(out, reference)
    no_leftovers(out)


@pytest.fixture
def full_disk_after_one_parquet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parquet writer writes its first file, then finds the disk full."""
    write = pd.DataFrame.to_parquet
    calls = []

    def to_parquet(self: pd.DataFrame, path: Path, *args: object, **kwargs: object) -> None:
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "Error writing bytes to file")  # no name, as pyarrow's
        write(self, path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)


@pytest.mark.parametrize("before", ["nothing", "a complete run"])
@pytest.mark.usefixtures("full_disk_after_one_parquet")
def test_a_write_failure_mid_write_leaves_nothing_that_looks_complete(
        experiment: Path, reference: dict[int, Path], tmp_path: Path, before: str) -> None:
    out = tmp_path / "out"
    if before != "nothing":
        _copy(reference[1], out)
    fails_cleanly(_args(experiment, out, 2), f"could not write {out / 'timeseries.parquet'}",
                  "No space left on device")
    if before == "nothing":
        assert not out.exists()  # not even the first, complete parquet file
    else:
        assert _snapshot(out) == _snapshot(reference[1])  # the previous run, untouched
    no_leftovers(out)


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, check=False)
    return done.returncode == 0


# 16 KiB: the first parquet file does not fit; 48 KiB: the data does, the report's plots not.
@pytest.mark.parametrize(("size", "fails_at"), [("16k", "requests.parquet"), ("48k", "")])
def test_a_full_small_filesystem_is_one_line_and_leaves_it_empty(
        experiment: Path, tmp_path: Path, size: str, fails_at: str) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount_tmpfs(disk, size):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        out = disk / "res"
        fails_cleanly(_args(experiment, out, 1), f"could not write {out / fails_at}",
                      "No space left on device")
        assert list(disk.iterdir()) == []  # the staging folder is gone, its space given back
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_sigkill_while_moving_files_in_leaves_no_complete_looking_folder(
        experiment: Path, reference: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    _copy(reference[1], out)
    killed = _cli(*_args(experiment, out, 2), script=KILLED_MID_MOVE)
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "summary.json").exists()  # seed 1's marker went first
    _run_ok(experiment, out, 2)  # the dead run's lock and staging folder are taken over
    assert _snapshot(out) == _snapshot(reference[2])
    no_leftovers(out)


def _staged(parent: Path, name: str) -> bool:
    """Whether the run has a staging folder holding `name` (its files are being written)."""
    return any(p.name.startswith(".out.partial-") and (p / name).exists()
               for p in parent.iterdir())


def _changed(parent: Path) -> bool:
    """Whether the folder differs from the previous run's copy in any file (its name, size or
    time): the first change to it, however the writer goes about it."""
    return _stats(parent / "out") != _stats(parent / "previous")


def _stats(folder: Path) -> set[tuple[str, int, int]]:
    try:
        found = [(p, p.stat()) for p in folder.rglob("*") if p.is_file()]
    except FileNotFoundError:  # a file moved or removed while listing: changed
        return set()
    return {(str(p.relative_to(folder)), s.st_size, s.st_mtime_ns) for p, s in found}


# The moment of the kill: while simulating, as the data files are written, while the report is
# drawn (its plots folder there), as the files are moved in, at the first change to the folder.
MOMENTS = {
    "simulating": lambda parent: any(p.name.endswith(".batchsim-lock") for p in parent.iterdir()),
    "writing data": lambda parent: _staged(parent, ""),
    "drawing the report": lambda parent: _staged(parent, "plots"),
    "moving in": lambda parent: _staged(parent, ".old-plots"),
    "first change": _changed,
}


# Three moments by default; the report's and the move's (a second apiece) with -m slow.
_SLOW_MOMENTS = ("drawing the report", "moving in")


@pytest.mark.parametrize("moment", [
    pytest.param(moment, marks=pytest.mark.slow) if moment in _SLOW_MOMENTS else moment
    for moment in MOMENTS])
def test_sigkill_at_any_moment_leaves_the_previous_folder_or_nothing_complete(
        experiment: Path, reference: dict[int, Path], tmp_path: Path, moment: str) -> None:
    out = tmp_path / "out"
    _copy(reference[1], out)
    subprocess.run(["cp", "-a", str(out), str(tmp_path / "previous")], check=True)  # same times
    run = _cli(*_args(experiment, out, 2))
    reached = MOMENTS[moment]
    while run.poll() is None and not reached(tmp_path):
        time.sleep(0.001)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=300)
    _assert_complete_or_not_looking_so(out, reference)
    _run_ok(experiment, out, 2)  # and the next run gets the folder
    assert _snapshot(out) == _snapshot(reference[2])
