"""The local executor's workers: kept from one `run` to the next until `close`, and replaced
after a failed run (a plan calls `run` once per round of its search)."""

from __future__ import annotations

import os

import pytest

from batchsim.apps.executors import LocalProcesses


def worker_pid(_: int) -> int:
    return os.getpid()


def fail_on_two(task: int) -> int:
    if task == 2:
        raise ValueError("task 2 fails")
    return task


def pids(executor: LocalProcesses, tasks: int) -> set[int]:
    return {pid for _, pid in executor.run(worker_pid, list(range(tasks)))}


def test_the_workers_serve_every_run_until_closed() -> None:
    executor = LocalProcesses(2)
    try:
        first = pids(executor, 6)
        second = pids(executor, 6)
    finally:
        executor.close()
    assert os.getpid() not in first
    assert second <= first  # the same processes, not a new pool per run
    after_close = pids(executor, 6)
    executor.close()
    assert not after_close & first


def test_a_failed_run_stops_its_workers_and_the_next_starts_new_ones() -> None:
    executor = LocalProcesses(2)
    try:
        before = pids(executor, 4)
        with pytest.raises(ValueError, match="task 2 fails"):
            list(executor.run(fail_on_two, [0, 1, 2, 3]))
        assert sorted(result for _, result in executor.run(fail_on_two, [0, 1, 3])) == [0, 1, 3]
        after = pids(executor, 4)
    finally:
        executor.close()
    assert not after & before


def test_close_is_idempotent_and_one_job_runs_here() -> None:
    executor = LocalProcesses(1)
    assert pids(executor, 3) == {os.getpid()}
    executor.close()
    executor.close()
