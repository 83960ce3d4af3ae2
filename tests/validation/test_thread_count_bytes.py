"""Same seed, same bytes on any machine: outputs do not depend on the BLAS thread count.

A BLAS dot product splits a long vector over its threads, so its last bits change with the
thread count; every sum that feeds an output is one whose order we control.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_OUTPUTS = ("summary.json", "requests.parquet", "timeseries.parquet")


def _run(out: Path, threads: int) -> None:
    env = {**os.environ, **dict.fromkeys(_THREAD_VARIABLES, str(threads))}
    command = [sys.executable, "-c", "from batchsim.apps.cli import main; main()", "run",
               str(REPO / "experiments" / "quickstart.yaml"), "--out", str(out)]
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=REPO)


# Two whole runs in subprocesses; same-seed bytes are checked by default (cli/test_run_outputs).
@pytest.mark.slow
def test_outputs_are_the_same_bytes_with_one_thread_and_with_two(tmp_path: Path) -> None:
    _run(tmp_path / "one", 1)
    _run(tmp_path / "two", 2)
    for name in _OUTPUTS:
        one, two = (tmp_path / "one" / name).read_bytes(), (tmp_path / "two" / name).read_bytes()
        assert one == two, name
