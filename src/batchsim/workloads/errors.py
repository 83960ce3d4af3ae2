"""The one exception type the workloads package raises for bad user input."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload input (trace, length column, trace name) is unusable.

    The message is one user-facing line that names the file, and the line in it where that
    helps, so the CLI can print it as-is instead of a traceback from deep inside pandas.
    """
