"""`batchsim sweep`: plan the runs, run them with a progress bar, write and print the summary."""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from batchsim.apps.executors import Executor, make_executor
from batchsim.apps.interrupt import InterruptReported
from batchsim.apps.sweep.outputs import print_slo_reach, print_sweep_table, write_sweep_outputs
from batchsim.apps.sweep.points import SweepAxis, parse_axis
from batchsim.apps.sweep.runs import RunOutcome, RunTask, SweepPlan, plan_sweep, run_sweep
from batchsim.apps.terminal import output_console, print_plain
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.output_folder import hold_folder, output_folder
from batchsim.experiment.schema import Experiment


def sweep_axes(exp: Experiment, params: list[str]) -> list[SweepAxis]:
    """The command line's --param axes, else the file's `sweep:` (never both: ambiguous)."""
    if params and exp.sweep is not None:
        raise ConfigError("sweep: the file has a `sweep:` and --param was given; use one "
                          "(or drop the file's with --set sweep=null)")
    if params:
        return [parse_axis(text) for text in params]
    return [SweepAxis(c.parameter, tuple(c.values)) for c in exp.sweep or []]


SWEEP_FILES = ("summary.json", "sweep.parquet", "report.html")


@dataclass(slots=True)
class SweepTally:
    """The runs of a sweep so far, for what the console says of them."""

    folder: Path | None = None
    runs: int = 0  # planned
    complete: int = 0  # read back or written
    read_back: int = 0  # of those, complete on disk before this sweep
    arms: int = 0  # arm results of the complete runs
    read_back_arms: int = 0
    simulated: int = 0  # arms simulated by this sweep

    def add(self, outcome: RunOutcome) -> None:
        self.complete += 1
        self.arms += len(outcome.rows)
        self.simulated += outcome.simulated
        if outcome.skipped:
            self.read_back += 1
            self.read_back_arms += len(outcome.rows)

    def arms_line(self) -> str:
        """How each arm result was obtained: simulated, reused or read back."""
        per_run = self.arms // self.runs if self.runs else 0
        shape = f" ({self.runs} runs x {per_run} arms)" if per_run * self.runs == self.arms else ""
        reused = self.arms - self.simulated - self.read_back_arms
        parts = [f"{self.simulated} simulated"]
        if reused:
            parts.append(f"{reused} reused from a run where the arm's configuration was "
                         "identical")
        if self.read_back:
            parts.append(f"{self.read_back_arms} read back: {self.read_back} runs were "
                         "already complete")
        return f"{self.arms} arm results{shape}: " + ", ".join(parts)

    def interrupted_line(self) -> str:
        if self.folder is None or not self.runs:
            return "interrupted before any run started"
        return (f"interrupted: {self.complete} of {self.runs} runs are complete in "
                f"{self.folder}; run the same command again to resume (complete runs are "
                "read back, not simulated again)")


def run_sweep_command(file: Path, overrides: list[str], params: list[str], out: Path | None,
                      *, jobs: int, executor: str, address: str | None) -> None:
    tally = SweepTally()
    try:
        _run_sweep_command(file, overrides, params, out, tally, jobs=jobs, executor=executor,
                           address=address)
    except KeyboardInterrupt:
        # One line, no traceback: the executor has already stopped its workers.
        Console(stderr=True).print(tally.interrupted_line(), markup=False, highlight=False,
                                   soft_wrap=True)
        raise InterruptReported() from None


def _run_sweep_command(file: Path, overrides: list[str], params: list[str], out: Path | None,
                       tally: SweepTally, *, jobs: int, executor: str,
                       address: str | None) -> None:
    console = output_console()
    exp, _ = load_experiment(file, overrides)
    axes = sweep_axes(exp, params)
    if not axes and exp.replications == 1:
        raise ConfigError(f"{file}: nothing to sweep: give --param KEY=V1,V2,..., a `sweep:` in "
                          "the file, or replications > 1")
    out_dir = output_folder(out, exp, SWEEP_FILES, command="sweep")
    plan = plan_sweep(file, overrides, axes, exp.replications, out_dir)
    runner = make_executor(executor, jobs=jobs, address=address)
    # Held from before the first run to after the last file: a second sweep (or a run, a plan,
    # a report) into this folder is refused now, not once its runs are done.
    with hold_folder(out_dir), closing(runner):
        tally.folder, tally.runs = out_dir, len(plan.tasks)
        print_plain(console, f"sweeping {exp.name}: {len(plan.points)} points x "
                             f"{len(plan.seeds)} replications = {len(plan.tasks)} runs")
        rows = _run_with_progress(plan, runner, tally, console)
        print_plain(console, tally.arms_line())
        print_sweep_table(rows, console)
        written = write_sweep_outputs(out_dir, exp, plan, rows)
        print_slo_reach(out_dir, console)
    _print_written(out_dir, written, console)


def _run_with_progress(plan: SweepPlan, runner: Executor, tally: SweepTally,
                       console: Console) -> list[dict[str, Any]]:
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("runs", total=len(plan.tasks))

        def done(task: RunTask, outcome: RunOutcome) -> None:
            tally.add(outcome)
            progress.advance(bar)

        return run_sweep(plan, runner, on_done=done)


def _print_written(out_dir: Path, written: list[Path], console: Console) -> None:
    from batchsim.apps.report.build import PLOTS_DIR, REPORT_FILE  # loaded by the writing

    for path in written:
        print_plain(console, f"wrote {path}")
    print_plain(console, f"wrote {out_dir / REPORT_FILE} (and its PNGs in {out_dir / PLOTS_DIR})")
