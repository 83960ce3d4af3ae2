"""Where sweep points run: in this process, in local worker processes, or on a Ray cluster.

Every executor runs the same pure task function on the same task descriptions, and each task
is deterministic, so results do not depend on which executor ran them — only the order in
which they complete does, and the caller keys results by task.

A caller that stops early (Ctrl-C, an error) closes the generator `run` returns: the executors
then cancel what has not started and stop what is running instead of finishing the queue.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class ExecutorError(ValueError):
    """An executor cannot be used as asked (e.g. Ray not installed)."""


Results = Generator[tuple[int, R], None, None]


class Executor(Protocol):
    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Results[R]:
        """Yield (task index, result) as tasks complete; closing it stops the tasks left."""
        ...

    def close(self) -> None:
        """Release what `run` kept for the next call (worker processes); idempotent."""
        ...


class InProcess:
    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Results[R]:
        for index, task in enumerate(tasks):
            yield index, fn(task)

    def close(self) -> None:
        """Nothing to release: every task ran in this process."""


class LocalProcesses:
    """`jobs` worker processes (spawned: no state shared with the parent by accident).

    The workers outlive a `run` and serve the next one until `close`: a plan calls `run` once
    per round of its search, and starting the workers again each round (a fresh interpreter
    importing batchsim, then reading the model and GPU files again) cost its rounds seconds
    each."""

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise ExecutorError(f"--jobs must be at least 1 (got {jobs})")
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Results[R]:
        if self.jobs == 1 or len(tasks) <= 1:
            yield from InProcess().run(fn, tasks)
            return
        try:
            # Submitting starts the workers the pool still lacks.
            with _started_ignoring_sigint():
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(
                        max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"))
                futures = {self._pool.submit(fn, task): index
                           for index, task in enumerate(tasks)}
            for future in as_completed(futures):
                yield futures[future], future.result()
        except BaseException:  # Ctrl-C, a task's error, or the caller closing the generator
            if self._pool is not None:
                _stop(self._pool)
                self._pool = None
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block is raised when the block ends, not inside it.

    A handler that notes the signal, not a blocked signal mask: Python raises
    KeyboardInterrupt in the main thread whichever of its threads the signal reached."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers, and only it gets KeyboardInterrupt
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt


@contextmanager
def _started_ignoring_sigint() -> Iterator[None]:
    """Processes started in the block (the pool starts its workers as tasks are submitted)
    ignore SIGINT for good: a Ctrl-C reaches the terminal's whole process group, and a worker
    interrupted in its start-up or in a task prints a traceback, then takes the next task
    anyway. Ctrl-C is this process's to handle, by stopping the pool.

    An ignored signal stays ignored across exec, and Python leaves it so; a blocked one
    would not stay blocked (multiprocessing unblocks SIGINT once its resource tracker has
    started). A Ctrl-C in these few milliseconds is lost: the user presses it again."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the tasks not started and end the workers running the others, now: shutting
    the pool down alone would wait for every running task to finish."""
    # No public way to end a pool's workers before Python 3.14 (terminate_workers): end the
    # processes of its table.
    for worker in list((pool._processes or {}).values()):
        worker.terminate()
    # Its manager thread now finds the workers gone, fails the tasks left and ends; waited
    # for, so that it is not still closing its pipes as Python exits (which Python 3.11
    # reports as an ignored exception in `_python_exit`).
    pool.shutdown(wait=True, cancel_futures=True)


class RayCluster:
    """Tasks as Ray remote functions, on the cluster at `address` or a fresh local one."""

    def __init__(self, address: str | None) -> None:
        try:
            import ray  # noqa: F401  (optional extra: batchsim[ray])
        except ImportError:
            raise ExecutorError(
                "--executor ray needs Ray: pip install 'batchsim[ray]'") from None
        self.address = address

    def run(self, fn: Callable[[T], R], tasks: list[T]) -> Results[R]:
        import ray

        started_here = not ray.is_initialized()
        if started_here and self.address is None:
            # A private local instance, reachable on loopback only.
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                     _node_ip_address="127.0.0.1")
        elif started_here:
            ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        pending: dict[Any, int] = {}
        try:
            remote = ray.remote(fn)
            pending.update((remote.remote(task), i) for i, task in enumerate(tasks))
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        except BaseException:  # Ctrl-C, a task's error, or the caller closing the generator
            for ref in pending:  # a cluster's workers outlive this process: stop its tasks
                ray.cancel(ref, force=True)
            raise
        finally:
            if started_here:
                ray.shutdown()

    def close(self) -> None:
        """Nothing to release: each run starts (and shuts down) its own local Ray, or uses
        the cluster's."""


def make_executor(kind: str, *, jobs: int, address: str | None) -> Executor:
    if kind == "local":
        return LocalProcesses(jobs)
    if kind == "ray":
        return RayCluster(address)
    raise ExecutorError(f"--executor {kind}: expected 'local' or 'ray'")
