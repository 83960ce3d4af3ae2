"""The floors of docs/design.md §1 hold: `lint-imports` keeps every contract in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept() -> None:
    lint = shutil.which("lint-imports")
    assert lint is not None, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout
