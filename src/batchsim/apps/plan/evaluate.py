"""Evaluate setups: run every replication of every setup through one executor call, then judge
each setup. One call per round keeps all the round's runs (several arms, candidates, what-ifs)
in flight together."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchsim.apps.executors import Executor
from batchsim.apps.plan.runs import RunStats
from batchsim.apps.plan.setups import Setup
from batchsim.apps.plan.verdict import Verdict, judge, mean_metrics
from batchsim.apps.sweep.runs import RunTask
from batchsim.experiment.schema import PlanKeepUpConfig, SLOConfig

MEETS, FAILS, DOES_NOT_FIT = "meets", "misses", "does not fit"


@dataclass(frozen=True, slots=True)
class Evaluation:
    setup: Setup
    status: str  # MEETS, FAILS or DOES_NOT_FIT
    reasons: list[str]
    verdict: Verdict | None  # None when it does not fit
    metrics: dict[str, Any] | None  # means over replications
    ci95: dict[str, Any] | None
    runs: list[RunStats]

    @property
    def meets(self) -> bool:
        return self.status == MEETS

    @property
    def served_output_tps(self) -> float | None:
        """Mean over replications of the output tokens served per second of arrivals."""
        values = [run.served_output_tps for run in self.runs]
        if not values or any(v is None for v in values):
            return None
        return sum(v for v in values if v is not None) / len(values)

    def metric(self, *path: str) -> float | None:
        node: Any = self.metrics
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return float(node) if isinstance(node, int | float) else None


@dataclass(frozen=True, slots=True)
class PlanRunner:
    """What every evaluation shares: the file, where runs go, the seeds and the rule."""

    file: Path
    out_dir: Path
    seeds: list[int]
    executor: Executor
    slo: SLOConfig
    keep_up: PlanKeepUpConfig
    on_round: Callable[[int], None] | None = None  # runs about to start
    on_run_done: Callable[[RunStats], None] | None = None

    def tasks_of(self, setup: Setup) -> list[RunTask]:
        folder = self.out_dir / setup.folder
        if len(self.seeds) == 1:
            return [RunTask(str(self.file), setup.overrides, str(folder))]
        return [RunTask(str(self.file), (*setup.overrides, f"seed={seed}"),
                        str(folder / f"rep-{index}")) for index, seed in enumerate(self.seeds)]

    def evaluate(self, setups: list[Setup]) -> list[Evaluation]:
        from batchsim.apps.plan.runs import measure_run  # module-level: pickles by name

        tasks: list[RunTask] = []
        owners: list[int] = []
        for index, setup in enumerate(setups):
            if setup.does_not_fit is None:
                for task in self.tasks_of(setup):
                    tasks.append(task)
                    owners.append(index)
        if self.on_round is not None:
            self.on_round(len(tasks))
        results: dict[int, RunStats] = {}
        for task_index, stats in self.executor.run(measure_run, tasks):
            results[task_index] = stats
            if self.on_run_done is not None:
                self.on_run_done(stats)
        runs: list[list[RunStats]] = [[] for _ in setups]
        for task_index, owner in enumerate(owners):
            runs[owner].append(results[task_index])
        return [self._judged(setup, setup_runs) for setup, setup_runs in zip(
            setups, runs, strict=True)]

    def _judged(self, setup: Setup, runs: list[RunStats]) -> Evaluation:
        if setup.does_not_fit is not None:
            return Evaluation(setup, DOES_NOT_FIT, [setup.does_not_fit], None, None, None, [])
        verdict = judge(runs, self.slo, self.keep_up)
        means, intervals = mean_metrics(runs)
        return Evaluation(setup, MEETS if verdict.meets else FAILS, verdict.reasons, verdict,
                          means, intervals, runs)
