"""`batchsim plan`: run the plan with progress, write plan.json / plan.md / pareto.png and
print the tables."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from batchsim.apps.executors import Executor, make_executor
from batchsim.apps.plan.outputs import PLAN_FILES, write_plan
from batchsim.apps.plan.planner import PlanResult, run_plan
from batchsim.apps.plan.records import plan_document
from batchsim.apps.plan.runs import RunStats
from batchsim.apps.plan.tables import TextTable, all_tables
from batchsim.apps.plan.verdict import judged_on
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.output_folder import hold_folder, output_folder
from batchsim.experiment.outputs import versions
from batchsim.metrics.confidence import t_critical

_RANKED_SHOWN = 12


def rich_table(table: TextTable) -> Table:
    rendered = Table(title=table.title)
    for index, header in enumerate(table.headers):
        rendered.add_column(header, justify="left" if index < 2 else "right")
    for row in table.rows:
        rendered.add_row(*row)
    return rendered


def check_replications(file: Path, replications: int) -> None:
    """Two replications judge every verdict on an interval too wide to tell anything apart:
    a plan runs one (judged on the run itself) or at least three."""
    if replications == 2:
        width = t_critical(1)
        raise ConfigError(
            f"{file}: replications: a plan judges each configuration on the upper end of the "
            f"95% interval, which with 2 replications is {width:.1f} standard errors above the "
            "mean, so nearly every configuration fails; use 1 (judged on the run itself) or "
            "3 or more")


def run_plan_command(file: Path, overrides: list[str], out: Path | None, *, jobs: int,
                     executor: str, address: str | None) -> None:
    console = Console()
    exp, _ = load_experiment(file, overrides)
    check_replications(file, exp.replications)
    out_dir = output_folder(out, exp, PLAN_FILES, command="plan")
    runner = make_executor(executor, jobs=jobs, address=address)
    # Held from before the first run to after the last file: a second plan (or a run, a sweep)
    # into this folder is refused now, not once its runs are done.
    with hold_folder(out_dir):
        result = _run_with_progress(file, overrides, out_dir, runner, console)
        document = plan_document(result, versions())
        for table in all_tables(document, ranked_limit=_RANKED_SHOWN, full=False):
            console.print(rich_table(table))
        console.print(f"p99 columns: the judged value, {judged_on(len(result.seeds))}",
                      highlight=False)
        written = write_plan(out_dir, result, document)
    for path in written:
        console.print(f"wrote {path}", highlight=False)


def _run_with_progress(file: Path, overrides: list[str], out_dir: Path, runner: Executor,
                       console: Console) -> PlanResult:
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    skipped = rounds = 0
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("runs", total=0)

        def on_round(runs: int) -> None:
            nonlocal rounds
            rounds += 1
            total = progress.tasks[0].total or 0
            progress.update(bar, total=total + runs, description=f"round {rounds}")

        def on_run_done(stats: RunStats) -> None:
            nonlocal skipped
            skipped += stats.skipped
            progress.advance(bar)

        result = run_plan(file, overrides, out_dir, runner, on_round=on_round,
                          on_run_done=on_run_done)
    if skipped:
        console.print(f"{skipped} runs were already complete and were not run again")
    return result
