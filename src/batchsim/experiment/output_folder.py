"""Where a run's results go: one resolution (`~` expanded once) and its checks, made before
anything is simulated, so a bad `--out` costs a one-line error, not a finished simulation.

And how they get there: under a lock that refuses a second live writer, written into a staging
folder and moved into place with a marker file last, so that a folder with its marker is
complete whatever happened (a full disk, two runs into one folder, SIGKILL). The marker is
summary.json for `batchsim run` and a sweep's own files, plan.json for a plan's, report.html
when `batchsim report` redraws a report; a sweep and a plan hold their folder's lock from
before their first run, so that their runs' folders, written inside it, are theirs alone.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
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


# --- Writing a folder: under a lock, through a staging folder, summary.json last ------------

MARKER = "summary.json"  # moved into place last: a folder holding it is complete
_LOCK_SUFFIX = ".batchsim-lock"


class FolderInUse(OutputFolderError):
    """Another live process holds the folder's lock."""


class OutputWriteError(OutputFolderError):
    """Writing the folder failed part-way (a full disk, a vanished file, a permission change)."""


@dataclass
class _Held:
    fd: int  # the open lock file; its flock is the lock
    room: Path  # where the lock file and staging folders are (`_workroom`), fixed when taken
    made: list[Path]  # folders made to hold the lock file, removed again if left empty
    depth: int = 1  # nested holds in this process


_HELD: dict[Path, _Held] = {}


def lock_path(folder: Path) -> Path:
    """The lock file of `folder`: beside it (see `_workroom`), holding the holder's pid."""
    real = _real(folder)
    return _lock_file(_workroom(real), real)


def _lock_file(room: Path, real: Path) -> Path:
    return room / f".{real.name}{_LOCK_SUFFIX}"


@contextmanager
def hold_folder(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock for the block, or raise `FolderInUse` naming the live process that
    holds it. The lock is a flock on `lock_path(folder)`: the kernel drops it when its holder
    dies, however it died, so a lock file left by a dead process is simply taken over, and a
    reused pid cannot keep a folder locked. Reentrant within a process (`batchsim run` holds
    it while simulating, the writer again while writing)."""
    real = _real(folder)
    held = _HELD.get(real)
    if held is None:
        held = _HELD[real] = _take(folder, real)
    else:
        held.depth += 1
    try:
        yield
    finally:
        held.depth -= 1
        if held.depth == 0:
            del _HELD[real]
            _release(real, held)


@contextmanager
def written_atomically(folder: Path, marker: str = MARKER) -> Iterator[Path]:
    """A fresh, empty staging folder to write `folder`'s files into; when the block ends they
    are moved into `folder`, `marker` last, so that a folder holding `marker` is complete.
    The block holds `folder`'s lock. On any error the staging folder is removed and `folder`
    keeps its previous files (or, if the error came while moving into it, lacks `marker`), and
    an `OSError` is raised as one `OutputWriteError` naming the file and the cause."""
    real = _real(folder)
    with hold_folder(folder), write_errors(folder):
        staging = _new_staging(_HELD[real].room, real)
        try:
            yield staging
            _commit(staging, real, marker)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def write_errors(folder: Path) -> Iterator[None]:
    """Raise an `OSError` of the block as one `OutputWriteError` naming the file (as it is
    named in `folder`, not in a staging folder) and the cause."""
    try:
        yield
    except OSError as err:
        shown = _shown(err.filename, folder) if err.filename else folder
        raise OutputWriteError(f"output folder {folder}: could not write {shown}: "
                               f"{_cause(err)}") from None


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """Give an `OSError` of the block that names no file (pyarrow's do not) `path`."""
    try:
        yield
    except OSError as err:
        if err.filename:
            raise
        raise OSError(err.errno, _cause(err), str(path)) from err


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` in UTF-8; a full disk shows at write or close, which name no
    file, so the error is given `path`."""
    with naming(path):
        path.write_text(text, encoding="utf-8")


def _real(folder: Path) -> Path:
    # Symlinks resolved: two runs reaching one folder by two names share one lock, and the
    # staging folder lies on the folder's own file system.
    return Path(os.path.realpath(folder))


def _workroom(real: Path) -> Path:
    """Where the lock and staging folders go: beside the folder, so that a new folder appears
    by one rename; inside it when it exists and that cannot work: it is a mount point (a
    rename cannot cross file systems) or its parent cannot be written."""
    if real.is_dir() and (os.path.ismount(real)
                          or not os.access(real.parent, os.W_OK | os.X_OK)):
        return real
    return real.parent


def _take(folder: Path, real: Path) -> _Held:
    room = _workroom(real)
    made = list(itertools.takewhile(lambda p: not p.exists(), (room, *room.parents)))
    try:
        fd = _lock(folder, _lock_file(room, real))
    except BaseException:
        _remove_empty(made)
        raise
    _remove_stale_staging(room, real)
    return _Held(fd, room, made)


def _lock(folder: Path, path: Path) -> int:
    """The open, flocked lock file at `path`, with this process's pid written in it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_locked(folder, path)
    except OSError as err:
        raise OutputFolderError(f"output folder {folder}: cannot take its lock {path}: "
                                f"{_cause(err)}") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as err:
        os.close(fd)
        raise OutputFolderError(f"output folder {folder}: cannot write its lock {path}: "
                                f"{_cause(err)}") from None
    return fd


def _open_locked(folder: Path, path: Path) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise FolderInUse(
                f"output folder {folder}: in use by another batchsim run (pid {holder}); "
                "wait for it to finish, or use another folder") from None
        if _still_linked(fd, path):  # not unlinked by a holder letting go meanwhile
            return fd
        os.close(fd)


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else "unknown"  # empty for the moment before it writes


def _still_linked(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


def _release(real: Path, held: _Held) -> None:
    # Unlinked before it is unlocked: a waiter that opened this file sees it gone and retries.
    with suppress(OSError):
        os.unlink(_lock_file(held.room, real))
    os.close(held.fd)
    _remove_empty(held.made)


def _remove_empty(made: list[Path]) -> None:
    for path in made:  # deepest first
        try:
            path.rmdir()
        except OSError:
            return


def _staging_name(real: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(real.name)}\.partial-\d+-[0-9a-f]{{8}}")


def _new_staging(room: Path, real: Path) -> Path:
    path = room / f".{real.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir()  # honours the umask, as the folder made directly would (mkdtemp makes 0700)
    return path


def _remove_stale_staging(room: Path, real: Path) -> None:
    """Staging folders of a run that was killed: only the lock holder writes them."""
    pattern = _staging_name(real)
    with suppress(OSError):  # tidying only: what cannot be removed stays hidden
        for entry in room.iterdir():
            if pattern.fullmatch(entry.name):
                shutil.rmtree(entry, ignore_errors=True)


def _commit(staging: Path, target: Path, marker: str) -> None:
    if staging.parent == target.parent and _rename_new(staging, target):
        return
    _merge(staging, target, marker)


def _rename_new(staging: Path, target: Path) -> bool:
    """A folder that does not exist yet appears whole, in one rename."""
    if os.path.lexists(target):
        return False
    try:
        os.rename(staging, target)
    except OSError as err:
        if err.errno in (errno.EEXIST, errno.ENOTEMPTY):  # made by someone else meanwhile
            return False
        raise
    return True


def _merge(staging: Path, target: Path, marker: str) -> None:
    """Move the staged files into an existing folder one rename each, `marker` last."""
    (target / marker).unlink(missing_ok=True)  # first: from here on it does not look complete
    for entry in sorted(staging.iterdir()):
        if entry.name != marker:
            _move(entry, target / entry.name, staging)
    if (staging / marker).exists():
        os.replace(staging / marker, target / marker)


def _move(source: Path, dest: Path, staging: Path) -> None:
    if source.is_dir() and dest.is_dir():
        # A folder (plots/) is replaced whole: an old plot would contradict the new page.
        os.rename(dest, staging / f".old-{dest.name}")  # removed with the staging folder
    os.replace(source, dest)


def _shown(filename: str | bytes, folder: Path) -> Path:
    """A path as the user knows it: one inside a staging folder is named inside `folder`."""
    path, staging = Path(os.fsdecode(filename)), _staging_name(_real(folder))
    for index, part in enumerate(path.parts):
        if staging.fullmatch(part):
            return folder.joinpath(*path.parts[index + 1:])
    return path


def _cause(err: OSError) -> str:
    """The cause in a few words: the errno's own text where there is one (pyarrow's texts
    wrap it in a paragraph), on one line."""
    if err.errno:
        return os.strerror(err.errno)
    return " ".join((err.strerror or str(err) or type(err).__name__).split())
