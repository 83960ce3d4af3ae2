"""Shared by the tests of locked, atomic result folders (#18 items 6 and 7): another live
holder of a folder's lock, a disk that fills up part-way through writing, and what a folder
must look like afterwards."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# Holds a folder's lock as another live run would, until its stdin closes.
HOLD = """import sys
from pathlib import Path
from batchsim.experiment.output_folder import hold_folder
with hold_folder(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""

# batchsim, killed by SIGKILL right after it moved its first file into an existing folder.
KILLED_MID_MOVE = """import os, signal, sys
from batchsim.experiment import output_folder
moved = output_folder._move
def move_then_die(*args):
    moved(*args)
    os.kill(os.getpid(), signal.SIGKILL)
output_folder._move = move_then_die
from batchsim.apps.cli import app
app(sys.argv[1:])
"""

FileStats = dict[str, tuple[bytes, int]]


@contextmanager
def held_by_another_process(folder: Path) -> Iterator[int]:
    """`folder`'s lock, held by another live process for the block (it holds it first, so
    the test is deterministic); yields that process's pid."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.communicate(timeout=30)


def refused_while_held(args: list[str], out: Path) -> None:
    """`batchsim ARGS` into `out`, which another live process holds: one line naming that
    process, and nothing written."""
    from tests.cli_checks import fails_cleanly

    with held_by_another_process(out) as pid:
        fails_cleanly(args, str(out), "in use by another batchsim run", f"(pid {pid})")
    assert not out.exists()


def killed_mid_move(args: list[str]) -> None:
    """Run `batchsim ARGS` in a process of its own that dies by SIGKILL as it moves its first
    file into an existing folder (it must get there)."""
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_MOVE, *args], capture_output=True,
                            text=True, timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr


def file_stats(folder: Path) -> FileStats:
    """Every file under `folder`: its bytes and modification time, so that a file rewritten
    with the same bytes still counts as touched."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def fail_writing(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Writing a file called `name` (`Path.write_text` or `write_bytes`) finds the disk full,
    after every file written before it; the error names no file, as one at write or close."""
    for method in ("write_text", "write_bytes"):
        write = getattr(Path, method)

        def failing(path: Path, *args: Any, _write: Any = write, **kwargs: Any) -> int:
            if path.name == name:
                raise OSError(errno.ENOSPC, "No space left on device")
            return int(_write(path, *args, **kwargs))

        monkeypatch.setattr(Path, method, failing)


def no_leftovers(folder: Path) -> None:
    """No lock file and no staging folder beside `folder` or anywhere in it."""
    beside = [p for p in folder.parent.iterdir() if p.name.startswith(".")]
    inside = [p for p in folder.rglob(".*")] if folder.is_dir() else []
    assert beside + inside == []
