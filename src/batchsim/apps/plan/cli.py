"""`batchsim plan`: run the plan with progress, write plan.json / plan.md / pareto.png /
report.html and print the answer: the verdict, the answers of every variant and the base's
best few candidates (the full tables are in the files)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from batchsim.apps.executors import Executor, make_executor
from batchsim.apps.plan.answer_text import plan_answer
from batchsim.apps.plan.outputs import PLAN_FILES, write_plan
from batchsim.apps.plan.planner import PlanResult, run_plan
from batchsim.apps.plan.records import plan_document
from batchsim.apps.plan.runs import RunStats
from batchsim.apps.plan.tables import TextTable, cheapest_table, max_rate_table, ranked_table
from batchsim.apps.plan.verdict import judged_on
from batchsim.apps.terminal import output_console, print_plain
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.output_folder import hold_folder, output_folder
from batchsim.experiment.outputs import versions
from batchsim.metrics.confidence import t_critical

_RANKED_SHOWN = 5  # the base's best few; plan.md and report.html rank every candidate


def rich_table(table: TextTable) -> Table:
    """TABLE for the terminal, every cell as plain text (a name may hold [...]); the title is
    the caller's to print (rich would wrap it to the table's width)."""
    rendered = Table()
    for index, header in enumerate(table.headers):
        rendered.add_column(Text(header), justify="left" if index < 2 else "right")
    for row in table.rows:
        rendered.add_row(*(Text(cell) for cell in row))
    return rendered


def print_answer(console: Console, document: dict[str, Any]) -> None:
    """The verdict, the answer tables and the base's best candidates: what to read first."""
    answer = plan_answer(document)
    print_plain(console, answer.headline)
    for line in answer.what_ifs:
        print_plain(console, f"  - {line}")
    base = document["variants"][0]
    tables = [cheapest_table(document), max_rate_table(document),
              ranked_table(base, _RANKED_SHOWN, full=False) if base["candidates"] else None]
    for table in tables:
        if table is not None:
            print_plain(console, table.title)
            console.print(rich_table(table))
            for note in table.notes:
                print_plain(console, note)
    print_plain(console, f"p99 columns: the judged value, {judged_on(document['replications'])}")


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
    console = output_console()
    exp, _ = load_experiment(file, overrides)
    check_replications(file, exp.replications)
    out_dir = output_folder(out, exp, PLAN_FILES, command="plan")
    runner = make_executor(executor, jobs=jobs, address=address)
    # Held from before the first run to after the last file: a second plan (or a run, a sweep)
    # into this folder is refused now, not once its runs are done.
    with hold_folder(out_dir), closing(runner):
        result = _run_with_progress(file, overrides, out_dir, runner, console)
        document = plan_document(result, versions())
        print_answer(console, document)
        written = write_plan(out_dir, document)
    for path in written:
        print_plain(console, f"wrote {path}")
    print_plain(console, "every table, every run: plan.md and report.html (the figures)")


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
        print_plain(console, f"{skipped} runs were already complete and were not run again")
    return result
