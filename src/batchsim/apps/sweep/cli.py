"""`batchsim sweep`: plan the runs, run them with a progress bar, write and print the summary."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from batchsim.apps.executors import make_executor
from batchsim.apps.sweep.outputs import print_sweep_table, write_sweep_summary
from batchsim.apps.sweep.points import SweepAxis, parse_axis
from batchsim.apps.sweep.runs import RunOutcome, RunTask, plan_sweep, run_sweep
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.output_folder import output_folder
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


def run_sweep_command(file: Path, overrides: list[str], params: list[str], out: Path | None,
                      *, jobs: int, executor: str, address: str | None) -> None:
    console = Console()
    exp, _ = load_experiment(file, overrides)
    axes = sweep_axes(exp, params)
    if not axes and exp.replications == 1:
        raise ConfigError(f"{file}: nothing to sweep: give --param KEY=V1,V2,..., a `sweep:` in "
                          "the file, or replications > 1")
    out_dir = output_folder(out, exp, SWEEP_FILES, command="sweep")
    plan = plan_sweep(file, overrides, axes, exp.replications, out_dir)
    runner = make_executor(executor, jobs=jobs, address=address)
    console.print(f"sweeping {exp.name}: {len(plan.points)} points x {len(plan.seeds)} "
                  f"replications = {len(plan.tasks)} runs", highlight=False)
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("runs", total=len(plan.tasks))
        skipped = 0

        def done(task: RunTask, outcome: RunOutcome) -> None:
            nonlocal skipped
            skipped += outcome.skipped
            progress.advance(bar)

        rows = run_sweep(plan, runner, on_done=done)
    if skipped:
        console.print(f"{skipped} runs were already complete and were not run again")
    print_sweep_table(rows, console)
    for path in write_sweep_summary(out_dir, exp, plan, rows):
        console.print(f"wrote {path}", highlight=False)
    from batchsim.apps.report.build import PLOTS_DIR, write_report  # matplotlib only when drawing

    report = write_report(out_dir)
    console.print(f"wrote {report} (and its PNGs in {out_dir / PLOTS_DIR})", highlight=False)
