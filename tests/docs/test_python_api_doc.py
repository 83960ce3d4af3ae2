"""The python examples of docs/how-to/python-api.md run, in order, as a notebook would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "how-to" / "python-api.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_page_has_examples() -> None:
    assert len(PYTHON_BLOCK.findall(PAGE.read_text("utf-8"))) >= 3


def test_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The page's paths are relative to the repository root; anything it writes lands here.
    (tmp_path / "experiments").symlink_to(REPO / "experiments")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}  # shared: later blocks use what earlier ones made
    for number, block in enumerate(PYTHON_BLOCK.findall(PAGE.read_text("utf-8")), start=1):
        exec(compile(block, f"{PAGE.name}#{number}", "exec"), namespace)
