"""A fingerprint of the files a run read besides its experiment file: the shipped GPU profiles
and model library, and every file the resolved configuration names (traces, length corpora,
a profile or a model config given by path). A sweep point on disk is complete only if its
configuration *and* this fingerprint match, so recalibrating a profile or editing a trace
reruns the points it affects instead of reusing stale results."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from batchsim.experiment.schema import Experiment

_SHIPPED = ("gpus", "models")  # folders of the hardware_profiles package that runs read


def inputs_digest(exp: Experiment, base_dir: Path) -> str:
    """SHA-256 over the shipped profile data and the files `exp` names, in a fixed order."""
    digest = hashlib.sha256()
    for name, data in _shipped_files():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for value in sorted(set(_strings(exp.model_dump(mode="json")))):
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if _is_file(path):
            digest.update(value.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _shipped_files() -> Iterator[tuple[str, bytes]]:
    root = resources.files("batchsim.hardware_profiles")
    for folder in _SHIPPED:
        for entry in sorted(root.joinpath(folder).iterdir(), key=lambda e: e.name):
            if entry.is_file():
                yield f"{folder}/{entry.name}", entry.read_bytes()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name too long to be a path
        return False
