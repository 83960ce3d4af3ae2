"""Sweeps and replications (docs/design.md §7–§8): many runs of one experiment, then one summary.

Each (point, replication) is an ordinary run of the experiment with `--set`-style overrides,
written to its own folder (`point-NNN_.../` and, with replications, `rep-R/`). A folder whose
summary.json already holds the same resolved configuration, read from the same input files
(`experiment.input_digest`), is complete and is not run again, so an interrupted sweep resumes
where it stopped. The other runs' arms are simulated once per distinct configuration
(arm_jobs.py) and each run is written as soon as it has all of its arms. The sweep's own
summary.json has one row per (point, arm): the point's values, the mean of every metric over
replications and its 95% t-interval.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchsim.apps.executors import Executor, sigint_deferred
from batchsim.apps.sweep.arm_jobs import (
    ArmSchedule,
    ReadyRun,
    RunSource,
    only_arms,
    simulate_arms,
)
from batchsim.apps.sweep.points import SweepAxis, SweepPoint, grid
from batchsim.experiment import runner
from batchsim.experiment.input_digest import inputs_digest
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.outputs import write_results
from batchsim.experiment.preflight import check_before_run
from batchsim.experiment.runner import ArmResult
from batchsim.experiment.schema import Experiment
from batchsim.metrics.confidence import aggregate

SUMMARY = "summary.json"


@dataclass(frozen=True, slots=True)
class RunTask:
    """One run: the experiment file, its overrides, and the folder its results go to."""

    file: str
    overrides: tuple[str, ...]
    out_dir: str


@dataclass(frozen=True, slots=True)
class RunOutcome:
    rows: list[dict[str, Any]]  # summary.json rows: arm and metrics
    skipped: bool  # already complete on disk
    simulated: int  # arms simulated for this run; the others were read back or reused


def replication_seeds(seed: int, replications: int) -> list[int]:
    """Independent seeds (SeedSequence.spawn); one replication keeps the file's seed."""
    if replications == 1:
        return [seed]
    children = np.random.SeedSequence(seed).spawn(replications)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


@dataclass(frozen=True, slots=True)
class ResolvedRun:
    """A task's experiment, loaded, and the fingerprint of the files it reads."""

    task: RunTask
    experiment: Experiment
    base_dir: Path
    inputs_digest: str

    @property
    def out_dir(self) -> Path:
        return Path(self.task.out_dir)

    def completed_rows(self) -> list[dict[str, Any]] | None:
        """Its rows, if its folder already holds this configuration's results."""
        return _completed(self.out_dir, self.experiment.model_dump(mode="json"),
                          self.inputs_digest)


def resolve_run(task: RunTask) -> ResolvedRun:
    exp, base_dir = load_experiment(Path(task.file), task.overrides)
    return ResolvedRun(task, exp, base_dir, inputs_digest(exp, base_dir))


def run_task(task: RunTask) -> RunOutcome:
    """Run one point, every arm (in whatever process the executor chose), or read it back if
    complete: the task of `batchsim plan`, whose setups have one arm each."""
    run = resolve_run(task)
    previous = run.completed_rows()
    if previous is not None:
        return RunOutcome(previous, skipped=True, simulated=0)
    result = runner.run_experiment(run.experiment, run.base_dir)
    write_results(result, run.out_dir)
    return RunOutcome(_read_rows(run.out_dir), skipped=False, simulated=len(result.arms))


def write_assembled(run: ResolvedRun, arms: list[ArmResult]) -> list[dict[str, Any]]:
    """Write a run from its arms' results, wherever they were simulated: the files
    `batchsim run` writes for it. Returns its rows as written."""
    # The runner given no arms resolves the deployment and builds the traffic as it does
    # before its first arm, and simulates nothing: the summary describes both.
    setting = runner.run_experiment(only_arms(run.experiment, []), run.base_dir)
    result = dataclasses.replace(setting, experiment=run.experiment,
                                 inputs_digest=run.inputs_digest, arms=arms)
    write_results(result, run.out_dir)
    return _read_rows(run.out_dir)


def _completed(out: Path, resolved: dict[str, Any],
               digest: str) -> list[dict[str, Any]] | None:
    path = out / SUMMARY
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None  # a half-written file from an interrupted run: run again
    same = document.get("config") == resolved and document.get("inputs_digest") == digest
    return document["rows"] if same else None


def _read_rows(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((out / SUMMARY).read_text(encoding="utf-8"))["rows"]
    return rows


@dataclass(frozen=True, slots=True)
class SweepPlan:
    points: list[SweepPoint]
    seeds: list[int]
    tasks: list[RunTask]  # point-major, then replication


def plan_sweep(file: Path, overrides: list[str], axes: list[SweepAxis], replications: int,
               out_dir: Path) -> SweepPlan:
    """Every run of the sweep; each point is checked as `batchsim run` checks a file (schema,
    deployments, token budgets) before anything runs, so a bad value fails now, naming its
    key (and the arm by its index in the file: an arm may later be simulated alone)."""
    exp, _ = load_experiment(file, overrides)
    points = grid(axes)
    seeds = replication_seeds(exp.seed, replications)
    tasks = []
    for point in points:
        # Point runs are plain runs: the file's own sweep keys do not apply inside them.
        point_overrides = [*overrides, "sweep=null", "replications=1", *point.overrides()]
        point_exp, base_dir = load_experiment(file, point_overrides)
        check_before_run(point_exp, base_dir)
        for index, seed in enumerate(seeds):
            folder = out_dir / point.folder_name()
            if replications > 1:
                folder = folder / f"rep-{index}"
            seeded = [*point_overrides, f"seed={seed}"] if replications > 1 else point_overrides
            tasks.append(RunTask(str(file), tuple(seeded), str(folder)))
    return SweepPlan(points, seeds, tasks)


def run_sweep(plan: SweepPlan, executor: Executor,
              on_done: Callable[[RunTask, RunOutcome], None] | None = None) -> list[dict[str, Any]]:
    """Run (or resume) every task, each distinct arm once; returns one summary row per
    (point, arm). `on_done` hears of each run as it is read back or written."""
    outcomes: dict[int, RunOutcome] = {}

    def done(index: int, outcome: RunOutcome) -> None:
        outcomes[index] = outcome
        if on_done is not None:
            on_done(plan.tasks[index], outcome)

    # A run is recorded (and written) with Ctrl-C deferred: it leaves no run half-written,
    # and the runs reported complete are exactly those on disk. A write takes a fraction of
    # the simulation it writes.
    to_run: dict[int, ResolvedRun] = {}
    for index, task in enumerate(plan.tasks):
        run = resolve_run(task)
        with sigint_deferred():
            previous = run.completed_rows()
            if previous is None:
                to_run[index] = run
            else:
                done(index, RunOutcome(previous, skipped=True, simulated=0))
    schedule = ArmSchedule({index: RunSource(run.task.file, run.task.overrides, run.experiment)
                            for index, run in to_run.items()})
    # Closed on the way out, so a Ctrl-C or an error stops the jobs still running or queued.
    with closing(executor.run(simulate_arms, schedule.jobs)) as finished_jobs:
        for job, arms in finished_jobs:
            for ready in schedule.finished(job, arms):
                with sigint_deferred():
                    done(ready.index, _write_ready(to_run.pop(ready.index), ready))
    return sweep_rows(plan, [outcomes[i] for i in range(len(plan.tasks))])


def _write_ready(run: ResolvedRun, ready: ReadyRun) -> RunOutcome:
    return RunOutcome(write_assembled(run, ready.arms), skipped=False, simulated=ready.simulated)


def sweep_rows(plan: SweepPlan, outcomes: list[RunOutcome]) -> list[dict[str, Any]]:
    reps = len(plan.seeds)
    rows = []
    for point in plan.points:
        runs = outcomes[point.index * reps:(point.index + 1) * reps]
        for arm_index, first in enumerate(runs[0].rows):
            samples = [run.rows[arm_index]["metrics"] for run in runs]
            means, intervals = aggregate(samples)
            rows.append({
                "arm": first["arm"],
                "point": point.values,
                "folder": point.folder_name(),
                "replications": reps,
                "seeds": plan.seeds,
                "metrics": means,
                "ci95": intervals if reps > 1 else None,
            })
    return rows
