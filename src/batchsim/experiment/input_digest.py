"""A fingerprint of the files a run read besides its experiment file: the shipped GPU, model
and engine profiles, and every file the configuration names where it takes a file (a `path`
of a trace, corpus, length or rate file, shipped names included; a `model`, `hardware` or
`engine` given by path). A sweep point on disk is complete only if its configuration *and*
this fingerprint match, so recalibrating a profile or editing a trace reruns the points it
affects instead of reusing stale results. Other strings (arm names, columns) are never
opened: a name that happens to be a file's is not read."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import batchsim.workloads as wl
from batchsim.experiment.schema import Experiment

_SHIPPED = ("gpus", "models", "engines")  # hardware_profiles folders that runs read
_FILE_KEYS = ("path", "model", "hardware", "engine")  # keys whose value may be a file


def inputs_digest(exp: Experiment, base_dir: Path) -> str:
    """SHA-256 over the shipped profile data and the files `exp` names, in a fixed order."""
    digest = hashlib.sha256()
    for name, data in _shipped_files():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for key, value in sorted(set(_file_values(exp.model_dump(mode="json")))):
        path = _named_file(key, value, base_dir)
        if path is not None:
            digest.update(value.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _named_file(key: str, value: str, base_dir: Path) -> Path | None:
    """The regular file a file key's value names, if any (a shipped trace name included)."""
    if key == "path":
        try:
            return wl.resolve_trace_path(value, base_dir)
        except wl.WorkloadError:
            return None
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base_dir / path
    return path if _is_file(path) else None


def _shipped_files() -> Iterator[tuple[str, bytes]]:
    root = resources.files("batchsim.hardware_profiles")
    for folder in _SHIPPED:
        for entry in sorted(root.joinpath(folder).iterdir(), key=lambda e: e.name):
            if entry.is_file():
                yield f"{folder}/{entry.name}", entry.read_bytes()


def _file_values(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, string) of every string under a file key, at any depth (lists included)."""
    if isinstance(value, str):
        if key in _FILE_KEYS:
            yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _file_values(item, str(name))
    elif isinstance(value, list):
        for item in value:
            yield from _file_values(item, key)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name too long to be a path
        return False
