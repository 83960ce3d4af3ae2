"""Exit 130 after Ctrl-C, for a command that has already said what the interrupt stopped."""

from __future__ import annotations


class InterruptReported(SystemExit):
    """Raised instead of `SystemExit(130)` once the command has printed its own line (a sweep
    says how many runs are complete), so the console script adds none."""

    def __init__(self) -> None:
        super().__init__(130)
