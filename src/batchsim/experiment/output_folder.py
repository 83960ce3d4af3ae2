"""Where a run's results go: one resolution (`~` expanded once) and its checks, made before
anything is simulated, so a bad `--out` costs a one-line error, not a finished simulation."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from batchsim.experiment.schema import Experiment

RUN_FILES = ("summary.json", "requests.parquet", "timeseries.parquet", "report.html")
# The file only each command writes at the top of its folder: what marks whose folder it is.
MARKERS = {"run": "requests.parquet", "sweep": "sweep.parquet", "plan": "plan.json"}


class OutputFolderError(ValueError):
    """The output folder cannot be written; the message names it and says why."""


def output_folder(out: Path | None, experiment: Experiment, files: Iterable[str] = RUN_FILES,
                  command: str = "run") -> Path:
    """`--out` if given, else the experiment's `output.dir` (or `results/<name>`), with `~`
    expanded; checked to be a folder that can be written with regular `files` in it and that
    holds no other command's results (a sweep must not mix its files into a run's folder)."""
    folder = (out if out is not None else experiment.output_dir).expanduser()
    check_writable(folder, files)
    for other, marker in MARKERS.items():
        if other != command and (folder / marker).is_file():
            raise OutputFolderError(
                f"output folder {folder}: holds the results of a `batchsim {other}` ({marker}); "
                f"give `batchsim {command}` another --out (or output.dir), or remove them first")
    return folder


def check_writable(folder: Path, files: Iterable[str] = ()) -> None:
    """Raise `OutputFolderError` unless `folder` is (or can be made) a writable folder in which
    none of `files` is anything but a regular file."""
    if folder.exists() and not folder.is_dir():
        raise OutputFolderError(f"output folder {folder}: exists and is not a folder")
    for name in files:
        target = folder / name
        if target.exists() and not target.is_file():
            raise OutputFolderError(f"output folder {folder}: {name} exists and is not a file")
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise OutputFolderError(f"output folder {folder}: {existing} is not a writable folder")
