"""Sweeps and replications (docs/design.md §7–§8): many runs of one experiment, then one summary.

Each (point, replication) is an ordinary run of the experiment with `--set`-style overrides,
written to its own folder (`point-NNN_.../` and, with replications, `rep-R/`). A folder whose
summary.json already holds the same resolved configuration, read from the same input files
(`experiment.input_digest`), is complete and is not run again, so an interrupted sweep resumes
where it stopped. The sweep's own summary.json has one row
per (point, arm): the point's values, the mean of every metric over replications and its 95%
t-interval.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchsim.apps.executors import Executor
from batchsim.apps.sweep.points import SweepAxis, SweepPoint, grid
from batchsim.experiment.input_digest import inputs_digest
from batchsim.experiment.loader import load_experiment
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


def replication_seeds(seed: int, replications: int) -> list[int]:
    """Independent seeds (SeedSequence.spawn); one replication keeps the file's seed."""
    if replications == 1:
        return [seed]
    children = np.random.SeedSequence(seed).spawn(replications)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


def run_task(task: RunTask) -> RunOutcome:
    """Run one point (in whatever process the executor chose), or read it back if complete."""
    from batchsim.experiment.outputs import write_results  # imported in the worker
    from batchsim.experiment.runner import run_experiment

    exp, base_dir = load_experiment(Path(task.file), task.overrides)
    out = Path(task.out_dir)
    resolved = exp.model_dump(mode="json")
    previous = _completed(out, resolved, inputs_digest(exp, base_dir))
    if previous is not None:
        return RunOutcome(previous, skipped=True)
    result = run_experiment(exp, base_dir)
    write_results(result, out)
    return RunOutcome(_read_rows(out), skipped=False)


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
    """Every run of the sweep; the file is validated once per point before anything runs."""
    exp, _ = load_experiment(file, overrides)
    points = grid(axes)
    seeds = replication_seeds(exp.seed, replications)
    tasks = []
    for point in points:
        # Point runs are plain runs: the file's own sweep keys do not apply inside them.
        point_overrides = [*overrides, "sweep=null", "replications=1", *point.overrides()]
        load_experiment(file, point_overrides)  # a bad value fails now, naming the key
        for index, seed in enumerate(seeds):
            folder = out_dir / point.folder_name()
            if replications > 1:
                folder = folder / f"rep-{index}"
            seeded = [*point_overrides, f"seed={seed}"] if replications > 1 else point_overrides
            tasks.append(RunTask(str(file), tuple(seeded), str(folder)))
    return SweepPlan(points, seeds, tasks)


def run_sweep(plan: SweepPlan, executor: Executor,
              on_done: Callable[[RunTask, RunOutcome], None] | None = None) -> list[dict[str, Any]]:
    """Run (or resume) every task; returns one summary row per (point, arm)."""
    from batchsim.apps.sweep.runs import (
        run_task as task_fn,  # a module-level function pickles by name
    )

    outcomes: dict[int, RunOutcome] = {}
    for index, outcome in executor.run(task_fn, plan.tasks):
        outcomes[index] = outcome
        if on_done is not None:
            on_done(plan.tasks[index], outcome)
    return sweep_rows(plan, [outcomes[i] for i in range(len(plan.tasks))])


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
