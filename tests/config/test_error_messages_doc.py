"""The error example in docs/reference/experiment.md is what `batchsim validate` prints for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "experiment.md"
_SECTION = re.compile(r"^## Error messages\n(.*?)^## ", re.MULTILINE | re.DOTALL)
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _documented_file_and_lines() -> tuple[str, list[str]]:
    section = _SECTION.search(REFERENCE.read_text("utf-8"))
    assert section is not None, "docs/reference/experiment.md lost its Error messages section"
    blocks = {lang: text for lang, text in _BLOCK.findall(section.group(1))}
    return blocks["yaml"], blocks[""].splitlines()


def test_the_documented_errors_are_the_ones_printed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text, expected = _documented_file_and_lines()
    monkeypatch.chdir(tmp_path)
    Path("exp.yaml").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", "exp.yaml"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == expected
