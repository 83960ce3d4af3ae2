"""Shared check for command-line errors: one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

from typer.testing import CliRunner

from batchsim.apps.cli import app


def fails_cleanly(args: list[str], *expected: str) -> str:
    """Run `batchsim ARGS`; it must fail as a user error naming every `expected` text."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert "Traceback" not in result.output + message
    assert len(message.splitlines()) == 1, message
    for text in expected:
        assert text in message, message
    return message
