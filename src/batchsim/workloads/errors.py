"""The one exception type the workloads package raises for bad user input."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload input (trace, length column, trace name) is unusable.

    The message is one user-facing line that names the file, and the line in it where that
    helps, so the CLI can print it as-is instead of a traceback from deep inside pandas.
    """


_SHOWN = 40


def shown(value: object) -> str:
    """`value` as an error message quotes it: its repr, cut to a few dozen characters, so a
    50 MB field (or the first line of a file that is not a trace) is not echoed in full."""
    text = repr(value)
    if len(text) <= _SHOWN:
        return text
    return f"{text[:_SHOWN]}… ({len(str(value)):,} characters)"
