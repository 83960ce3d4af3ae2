"""The `batchsim` console script: the CLI, with Ctrl-C at any moment one line and exit 130.

Its own module so that a Ctrl-C while the CLI's libraries are still being imported (the first
second or so of every command) is caught too: `apps/cli.py` cannot catch what interrupts its
own import.
"""

from __future__ import annotations

import sys

from batchsim.apps.interrupt import InterruptReported


def main() -> None:  # pragma: no cover - console-script entry
    try:
        from batchsim.apps.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:  # while importing, before the CLI handles anything
        _say_interrupted()
        raise SystemExit(130) from None
    except SystemExit as done:
        # typer turns Ctrl-C inside a command into a silent exit 130.
        if done.code == 130 and not isinstance(done, InterruptReported):
            _say_interrupted()
        raise


def _say_interrupted() -> None:
    sys.stderr.write("interrupted (Ctrl-C)\n")
