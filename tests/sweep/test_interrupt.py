"""Ctrl-C stops a sweep at once (#18 item 9): the queued runs are cancelled and the workers
ended, one line says what is complete and that the same command resumes; exit 130, no
traceback, whether the workers were still starting or already running.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group, workers included, so
the sweep runs in a session of its own and the signal goes to its group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

POINTS = 60
# About 0.4 s a run on one core, so the runs left after the first take far longer to finish
# (some 12 s on two workers) than the sweep is given to stop.
EXPERIMENT = {
    "name": "interrupted", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "max_model_len": 2048,
    "workload": {"arrivals": {"kind": "poisson", "rate": 20.0},
                 "prompt_tokens": {"kind": "uniform", "low": 64, "high": 512},
                 "output_tokens": {"kind": "uniform", "low": 16, "high": 256},
                 "num_requests": 4000},
    "policies": [{"name": "vllm", "kind": "continuous"}],
}
STOP_WITHIN_S = 4.0
# A worker takes a second or more to import the simulator: this far into it, it is importing.
IMPORTING_S = 0.3
START_WITHIN_S = 60.0  # generous: other work may share the machine

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists() or os.name != "posix",
                                reason="finds the worker processes in /proc")


class Sweep:
    """`batchsim sweep` in its own session, its output in files (a pipe could fill up)."""

    def __init__(self, tmp_path: Path) -> None:
        experiment = tmp_path / "exp.yaml"
        experiment.write_text(yaml.safe_dump(EXPERIMENT), encoding="utf-8")
        self.out = tmp_path / "out"
        self.stdout, self.stderr = tmp_path / "stdout", tmp_path / "stderr"
        seeds = ",".join(str(seed) for seed in range(1, POINTS + 1))
        command = [sys.executable, "-c", "from batchsim.apps.cli import main; main()",
                   "sweep", str(experiment), "--param", f"seed={seeds}", "--jobs", "2",
                   "--out", str(self.out)]
        with self.stdout.open("w") as stdout, self.stderr.open("w") as stderr:
            self.process = subprocess.Popen(command, stdout=stdout, stderr=stderr,
                                            start_new_session=True)

    def complete_runs(self) -> int:
        return len(list(self.out.glob("point-*/summary.json")))

    def workers_started(self) -> bool:
        return any(b"spawn_main" in cmdline for cmdline in self._group_cmdlines())

    def _group_cmdlines(self) -> Iterator[bytes]:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.process.pid:
                continue
            try:
                if os.getpgid(int(entry.name)) == self.process.pid:
                    yield (entry / "cmdline").read_bytes()
            except OSError:  # gone meanwhile
                continue

    def group_alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.process.poll() is None, self.stderr.read_text()
            assert time.monotonic() < deadline, "the sweep did not get there in time"
            time.sleep(0.02)

    def ctrl_c(self) -> float:
        """Send SIGINT to the group; the seconds until the sweep exited."""
        sent = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {STOP_WITHIN_S} s after Ctrl-C "
                        f"({self.complete_runs()} of {POINTS} runs complete)")
        return time.monotonic() - sent

    def kill(self) -> None:
        if self.group_alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    running = Sweep(tmp_path)
    yield running
    running.kill()


def _assert_stopped_cleanly(sweep: Sweep) -> None:
    assert sweep.process.returncode == 130
    deadline = time.monotonic() + STOP_WITHIN_S
    while sweep.group_alive():  # the workers, ended with it
        assert time.monotonic() < deadline, list(sweep._group_cmdlines())
        time.sleep(0.05)
    errors = sweep.stderr.read_text()
    assert "Traceback" not in errors + sweep.stdout.read_text(), errors
    lines = errors.strip().splitlines()
    assert len(lines) == 1, errors
    line = lines[0]
    complete = sweep.complete_runs()
    assert complete < POINTS // 2  # the queue was not run to its end
    assert line.startswith(f"interrupted: {complete} of {POINTS} runs are complete in ")
    assert "run the same command again to resume" in line


# Slow: Ctrl-C is checked by default for `run` (tests/cli/test_interrupt_cli.py) and a killed
# sweep's folders by test_sigkill_mid_sweep_leaves_only_complete_point_folders.
@pytest.mark.slow
def test_ctrl_c_after_the_first_run_stops_the_sweep_at_once(sweep: Sweep) -> None:
    sweep.wait_until(lambda: sweep.complete_runs() > 0, START_WITHIN_S)
    sweep.ctrl_c()
    _assert_stopped_cleanly(sweep)
    assert sweep.complete_runs() >= 1


# Ctrl-C mid-sweep is checked by default above; this moment with -m slow.
@pytest.mark.slow
def test_ctrl_c_while_the_workers_start_stops_without_a_traceback(sweep: Sweep) -> None:
    sweep.wait_until(sweep.workers_started, START_WITHIN_S)
    time.sleep(IMPORTING_S)
    sweep.ctrl_c()
    _assert_stopped_cleanly(sweep)


def test_sigkill_mid_sweep_leaves_only_complete_point_folders(sweep: Sweep) -> None:
    """No handler runs on SIGKILL: whatever was being written, a point folder is complete
    (its summary last, every table readable) or has no summary, and the sweep's own summary
    is not there."""
    sweep.wait_until(lambda: sweep.complete_runs() > 1, START_WITHIN_S)
    sweep.kill()
    assert not (sweep.out / "summary.json").exists()
    complete = 0
    for point in sorted(sweep.out.glob("point-*")):
        if not (point / "summary.json").exists():
            continue
        complete += 1
        summary = json.loads((point / "summary.json").read_text(encoding="utf-8"))
        requests = pd.read_parquet(point / "requests.parquet")
        assert len(requests) == EXPERIMENT["workload"]["num_requests"]  # type: ignore[index]
        assert summary["rows"][0]["metrics"]["completed"] <= len(requests)
        pd.read_parquet(point / "timeseries.parquet")
    assert complete >= 2
