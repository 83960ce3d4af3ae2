"""`batchsim replay`: read measured benchmarks, simulate each case, print and write the error."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pandas as pd
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from batchsim.apps.replay.bench_results import DEPLOYMENT_KEYS, read_bench_results
from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.measured import MeasuredCase, ReplayError, Unreplayed, read_cases
from batchsim.apps.replay.score import (
    GROUP,
    SUMMARY_HEADERS,
    case_table,
    error_summary,
    figure_summary,
    percent,
    summary_cells,
)
from batchsim.apps.replay.simulate import EngineChoice, replay_cases
from batchsim.apps.terminal import output_console
from batchsim.experiment.engine_profile import load_engine_profile
from batchsim.experiment.output_folder import check_writable
from batchsim.experiment.outputs import json_safe, versions


def run_replay_command(files: Sequence[Path], out: Path, requests_per_user: int,
                       warmup_per_user: int, engines: Sequence[str], *, jobs: int,
                       metadata: Sequence[str] = (), drained_warmup: bool = True) -> None:
    out = out.expanduser()
    given = parse_metadata(metadata)
    try:
        client = BenchmarkClient(requests_per_user, warmup_per_user, drained_warmup)
    except ValueError as err:
        raise ReplayError(f"--warmup-per-user: {err}") from None
    choice = EngineChoice(parse_engine_options(engines))
    for ref in sorted(set(choice.profiles.values())):
        load_engine_profile(ref)  # a named profile that does not load fails here, not per case
    check_writable(out, ("replay.json", "replay.parquet", "report.html"))
    console = output_console()  # a file or a pipe: the whole table, not 80 columns of it
    cases: list[MeasuredCase] = []
    skipped: list[Unreplayed] = []
    for file in files:
        found, unread = (read_bench_results(file, given) if file.suffix in BENCH_SUFFIXES
                         else read_cases(file))
        cases += found
        skipped += unread
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("simulating cases", total=len(cases))
        replayed, failed = replay_cases(cases, client, choice.for_case, jobs=jobs,
                                        on_case=lambda done: progress.update(task, completed=done))
    skipped += failed
    table = case_table(replayed)
    summary = error_summary(table, skipped)
    _write(out, files, client, choice, table, summary, skipped, given)
    from batchsim.apps.replay.report import write_replay_report  # matplotlib only here

    write_replay_report(out, table, summary, len(skipped))
    console.print(_summary_table(summary))
    figures = figure_summary(table)
    if len(figures):
        console.print(_figure_table(figures))
    for reason, count in Counter(s.reason for s in skipped).most_common():
        console.print(f"not simulated: {count} row(s): {escape(reason)}")
    console.print(f"wrote {escape(str(out))}/: replay.json, replay.parquet, report.html")


def parse_engine_options(options: Sequence[str]) -> dict[str, str]:
    """`--engine` values: `PROFILE` for every backend (`*`), `BACKEND=PROFILE` for one."""
    profiles: dict[str, str] = {}
    for option in options:
        backend, sep, profile = option.partition("=")
        if not sep:
            backend, profile = "*", option
        if not backend.strip() or not profile.strip():
            raise ReplayError(f"--engine {option!r}: expected PROFILE or BACKEND=PROFILE")
        profiles[backend.strip()] = profile.strip()
    return profiles


BENCH_SUFFIXES = (".json", ".jsonl")


def parse_metadata(options: Sequence[str]) -> dict[str, str]:
    """`--metadata KEY=VALUE` values, for the deployment keys a JSON result may lack."""
    known = {name for names in DEPLOYMENT_KEYS.values() for name in names}
    given: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ReplayError(f"--metadata {option!r}: expected KEY=VALUE")
        if key not in known:
            raise ReplayError(f"--metadata {option!r}: unknown key {key!r} (expected one of "
                              f"{', '.join(sorted(known))})")
        given[key] = value.strip()
    return given


def _write(out: Path, files: Sequence[Path], client: BenchmarkClient, choice: EngineChoice,
           table: pd.DataFrame, summary: pd.DataFrame, skipped: Sequence[Unreplayed],
           metadata: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / "replay.parquet", index=False)
    document = {
        "inputs": [file.name for file in files],
        **asdict(client),
        "engine_profiles": choice.profiles,
        "metadata": metadata,
        "summary": summary.to_dict("records"),
        "figures": figure_summary(table).to_dict("records"),
        "not_simulated": [{"case_id": s.case_id, "source": s.source, "engine": s.engine,
                           "model": s.model, "gpu": s.gpu, "reason": s.reason}
                          for s in skipped],
        "versions": versions(),
    }
    text = json.dumps(json_safe(document), indent=2, allow_nan=False)
    (out / "replay.json").write_text(text + "\n", encoding="utf-8")


def _figure_table(figures: pd.DataFrame) -> Table:
    table = Table(title="simulated / measured − 1, every figure the results report")
    for index, header in enumerate(("figure", "cases", "median |err|", "p90 |err|", "bias")):
        table.add_column(header, justify="left" if index == 0 else "right")
    for row in figures.to_dict("records"):
        table.add_row(escape(str(row["figure"])), str(row["cases"]),
                      *(percent(row[key]) for key in ("median_abs", "p90_abs", "median_signed")))
    return table


def _summary_table(summary: pd.DataFrame) -> Table:
    table = Table(title="simulated / measured − 1 (mean TTFT, mean TPOT)")
    for index, header in enumerate(SUMMARY_HEADERS):
        table.add_column(header, justify="left" if index < len(GROUP) else "right")
    for row in summary.to_dict("records"):
        table.add_row(*(escape(cell) for cell in summary_cells(row)))
    return table
