"""Where sweep points run: in this process, in local worker processes, or on a Ray cluster.

Every executor runs the same pure task function on the same task descriptions, and each task
is deterministic, so results do not depend on which executor ran them — only the order in
which they complete does, and the caller keys results by task.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class ExecutorError(ValueError):
    """An executor cannot be used as asked (e.g. Ray not installed)."""


class Executor(Protocol):
    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[tuple[int, R]]:
        """Yield (task index, result) as tasks complete."""
        ...


class InProcess:
    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[tuple[int, R]]:
        for index, task in enumerate(tasks):
            yield index, fn(task)


class LocalProcesses:
    """`jobs` worker processes (spawned: no state shared with the parent by accident)."""

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise ExecutorError(f"--jobs must be at least 1 (got {jobs})")
        self.jobs = jobs

    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[tuple[int, R]]:
        if self.jobs == 1 or len(tasks) <= 1:
            yield from InProcess().run(fn, tasks)
            return
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(tasks)),
                                 mp_context=context) as pool:
            futures = {pool.submit(fn, task): index for index, task in enumerate(tasks)}
            for future in as_completed(futures):
                yield futures[future], future.result()


class RayCluster:
    """Tasks as Ray remote functions, on the cluster at `address` or a fresh local one."""

    def __init__(self, address: str | None) -> None:
        try:
            import ray  # noqa: F401  (optional extra: batchsim[ray])
        except ImportError:
            raise ExecutorError(
                "--executor ray needs Ray: pip install 'batchsim[ray]'") from None
        self.address = address

    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[tuple[int, R]]:
        import ray

        started_here = not ray.is_initialized()
        if started_here and self.address is None:
            # A private local instance, reachable on loopback only.
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                     _node_ip_address="127.0.0.1")
        elif started_here:
            ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        try:
            remote = ray.remote(fn)
            pending: dict[Any, int] = {remote.remote(task): i for i, task in enumerate(tasks)}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        finally:
            if started_here:
                ray.shutdown()


def make_executor(kind: str, *, jobs: int, address: str | None) -> Executor:
    if kind == "local":
        return LocalProcesses(jobs)
    if kind == "ray":
        return RayCluster(address)
    raise ExecutorError(f"--executor {kind}: expected 'local' or 'ray'")
