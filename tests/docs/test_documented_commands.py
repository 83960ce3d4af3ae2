"""Every `batchsim run|sweep|plan|validate experiments/...` command the docs show works as
written.

By default each is checked with `validate`: its file, every `--set` and every `--param` key (at
its first value) — what a stale command gets wrong (a renamed arm, a removed key) `validate`
catches in seconds. With `-m slow` each one is also run, as written but for its output folder
(a temporary one), which takes minutes (the Azure hour, the capacity plan).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_COMMAND = re.compile(r"^\s*(batchsim (?:run|sweep|plan|validate) experiments/\S+\.yaml.*)$")


def _documented_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            match = _COMMAND.match(line.replace("python -m pip install -e '.[dev]' && ", ""))
            if match is None:
                continue
            command = match.group(1)
            while command.endswith("\\"):  # a command continued on the next line
                index += 1
                command = command[:-1] + " " + lines[index].strip()
            found.append((str(page.relative_to(REPO)), command.strip().strip("`")))
    return found


def _validate_args(command: str) -> list[str]:
    """`batchsim validate FILE --set ...` for a documented run/sweep/plan command."""
    words = shlex.split(command)[1:]
    args = ["validate", words[1]]
    flags = iter(words[2:])
    for flag in flags:
        if flag == "--set":
            args += ["--set", next(flags)]
        elif flag == "--param":
            key, values = next(flags).split("=", 1)
            args += ["--set", f"{key}={values.split(',')[0]}"]
        elif flag == "--replications":
            args += ["--set", f"replications={next(flags)}"]
        elif flag == "--trace":  # `run --trace` is this override
            args += ["--set", "output.trace=true"]
        elif flag in ("--out", "--jobs", "--executor", "--address"):
            next(flags)
        else:  # as written the command would fail (a comment left on its line, say)
            raise AssertionError(f"{command!r}: {flag!r} is not an option the command takes")
    return args


COMMANDS = _documented_commands()


def test_the_docs_show_commands_to_check() -> None:
    assert len(COMMANDS) >= 15
    assert any("--param" in command for _, command in COMMANDS)


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_documented_command_is_valid_as_written(page: str, command: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    done = CliRunner().invoke(app, _validate_args(command))
    assert done.exit_code == 0, f"{page}: `{command}`: {done.output}"


def _run_args(command: str, out: Path) -> list[str]:
    """The documented command's arguments, writing into `out` instead of its own folder."""
    words = shlex.split(command)[1:]
    args: list[str] = []
    flags = iter(words)
    for word in flags:
        if word == "--out":
            next(flags)
        else:
            args.append(word)
    return args if args[0] == "validate" else [*args, "--out", str(out)]


@pytest.mark.slow
@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_documented_command_runs_as_written(page: str, command: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    done = CliRunner().invoke(app, _run_args(command, tmp_path / "out"))
    assert done.exit_code == 0, f"{page}: `{command}`: {done.output}"
