"""Ctrl-C at any moment of a command is one line and exit 130, never a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRY = "from batchsim.apps.entry import main; main()"


@pytest.mark.parametrize("after_s", [0.3, 4.0], ids=["while importing", "while simulating"])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path, after_s: float) -> None:
    command = [sys.executable, "-c", ENTRY, "run", str(REPO / "experiments" / "quickstart.yaml"),
               "--set", "workload.duration_s=3000", "--out", str(tmp_path / "out")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    time.sleep(after_s)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "interrupted (Ctrl-C)"
    assert not (tmp_path / "out" / "summary.json").exists()
