"""The installed distribution's version, for `batchsim --version` and `batchsim.__version__`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    try:
        return version("batchsim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
