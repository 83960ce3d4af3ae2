"""An arm is simulated once per distinct configuration it sees, and reused wherever it recurs.

Sweeping one arm's knob changes nothing the other arms see, so each of them would compute the
same bytes at every point. What an arm sees, its *view*, is the run's experiment with
`policies` cut down to that arm: its own keys (and `deployment:`), every experiment-level key
and the seed. The sweep simulates one job per arm view it has not met yet and assembles each
run's results from the arms' results, wherever they were computed.

A job is the ordinary runner on the experiment with only the job's arms, so an arm's tables
are those `batchsim run` computes for it. One thing ties an arm to its place in `policies`:
speculative decoding seeds each replica's draws with the arm's index
(experiment/speculative_setup.py). Such an arm is simulated in the prefix of `policies` that
keeps it at its index; any other arm runs alone (its index only names it in error messages,
which `plan_sweep` raises before anything runs, from the whole point).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from batchsim.experiment import runner
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import ArmResult
from batchsim.experiment.schema import Arm, Experiment


@dataclass(frozen=True, slots=True)
class ArmJob:
    """Some arms of one run, simulated together: `arms` index the run's `policies`."""

    file: str
    overrides: tuple[str, ...]  # the run's
    arms: tuple[int, ...]


def simulate_arms(job: ArmJob) -> list[ArmResult]:
    """The executors' task: the job's arms, in the order of `job.arms`."""
    exp, base_dir = load_experiment(Path(job.file), job.overrides)
    return runner.run_experiment(only_arms(exp, job.arms), base_dir).arms


def only_arms(exp: Experiment, arms: Iterable[int]) -> Experiment:
    """`exp` with only these arms (in this order); nothing else changes."""
    return exp.model_copy(update={"policies": [exp.policies[index] for index in arms]})


def position_matters(arm: Arm) -> bool:
    """Whether the arm's results depend on its index in `policies` (speculative decoding)."""
    return getattr(arm, "speculative", None) is not None


def arm_views(exp: Experiment) -> list[str]:
    """One key per arm of `exp`: equal keys, equal results (a digest of the arm's view, and
    of its index where that matters)."""
    document = exp.model_dump(mode="json")
    dumped_arms = document.pop("policies")
    views = []
    for index, (arm, dumped) in enumerate(zip(exp.policies, dumped_arms, strict=True)):
        view = {"experiment": document, "arm": dumped,
                "index": index if position_matters(arm) else None}
        text = json.dumps(view, sort_keys=True, allow_nan=True)
        views.append(hashlib.sha256(text.encode()).hexdigest())
    return views


def jobs_for(needed: list[int], arms: list[Arm]) -> list[tuple[int, ...]]:
    """The jobs that simulate the `needed` arms of a run: each alone (so they run in
    parallel), except those whose index matters, which run in one prefix of `policies` that
    keeps them in place (the arms before them come along)."""
    placed = [index for index in needed if position_matters(arms[index])]
    prefix = tuple(range(max(placed) + 1)) if placed else ()
    alone: list[tuple[int, ...]] = [(index,) for index in needed if index not in prefix]
    return [prefix, *alone] if prefix else alone


@dataclass(frozen=True, slots=True)
class RunSource:
    """A run to simulate: the file and overrides its experiment comes from, and the experiment."""

    file: str
    overrides: tuple[str, ...]
    experiment: Experiment


@dataclass(frozen=True, slots=True)
class ReadyRun:
    """A run all of whose arms are simulated: its arms' results in `policies` order."""

    index: int
    arms: list[ArmResult]
    simulated: int  # how many of them this run's own jobs simulated (the rest were reused)


class ArmSchedule:
    """The jobs that simulate every distinct arm view of some runs once, and the runs each
    finished job completes."""

    def __init__(self, runs: Mapping[int, RunSource]) -> None:
        self.jobs: list[ArmJob] = []
        self._job_views: list[list[str]] = []  # the view of each arm a job simulates
        self._planned: set[str] = set()  # the views some job simulates
        self._views: dict[int, list[str]] = {}  # each run's arms' views, until it is ready
        self._waiting: dict[str, set[int]] = {}  # view -> the runs still waiting for it
        self._simulated: dict[int, int] = {}
        self._results: dict[str, ArmResult] = {}
        for index, run in runs.items():
            self._add_run(index, run)

    def _add_run(self, index: int, run: RunSource) -> None:
        views = arm_views(run.experiment)
        self._views[index] = views
        for view in views:
            self._waiting.setdefault(view, set()).add(index)
        needed = [arm for arm, view in enumerate(views) if view not in self._planned]
        jobs = jobs_for(needed, run.experiment.policies)
        for arms in jobs:
            self.jobs.append(ArmJob(run.file, run.overrides, arms))
            self._job_views.append([views[arm] for arm in arms])
            self._planned.update(views[arm] for arm in arms)
        self._simulated[index] = sum(len(arms) for arms in jobs)

    def finished(self, job: int, arms: list[ArmResult]) -> list[ReadyRun]:
        """Keep job `job`'s results; return the runs that now have every arm."""
        views = self._job_views[job]
        for view, arm in zip(views, arms, strict=True):
            if view in self._waiting:  # else an arm of a prefix, already used and let go
                self._results[view] = arm
        candidates = sorted({run for view in views for run in self._waiting.get(view, ())})
        ready = [ReadyRun(run, [self._results[view] for view in self._views[run]],
                          self._simulated[run])
                 for run in candidates
                 if all(view in self._results for view in self._views[run])]
        for run in ready:
            self._let_go(run.index)
        return ready

    def _let_go(self, run: int) -> None:
        """Drop the results no other run waits for: a sweep holds only what it will reuse."""
        for view in self._views.pop(run):
            waiting = self._waiting[view]
            waiting.discard(run)
            if not waiting:
                del self._waiting[view]
                self._results.pop(view, None)
