"""`batchsim calibrate engine DATA...`: fit an engine profile's costs, report the held-out error."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from batchsim.apps.engine_fit.fit import fit_engine
from batchsim.apps.engine_fit.record import fitted_profile, write_profile
from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.measured import MeasuredCase, ReplayError, Unreplayed, read_cases
from batchsim.apps.replay.score import percent
from batchsim.apps.replay.split import split_cases
from batchsim.apps.terminal import output_console
from batchsim.experiment.engine_profile import load_engine_profile


def run_engine_fit_command(data: Sequence[Path], engine: str, backend: str | None, out: Path,
                           client: BenchmarkClient, *, jobs: int,
                           serial_starts: Sequence[float], iterations: int,
                           free: Sequence[str]) -> None:
    console = output_console()
    base = load_engine_profile(engine)
    backend = backend or base.name
    cases: list[MeasuredCase] = []
    unread: list[Unreplayed] = []
    for file in data:
        found, bad = read_cases(file)
        cases += [case for case in found if case.engine == backend]
        unread += [row for row in bad if row.engine == backend]
    if not cases:
        raise ReplayError(f"no readable rows with backend {backend!r} in "
                          f"{', '.join(str(f) for f in data)}")
    fit_on, held_out = split_cases(cases)
    console.print(escape(f"{backend}: {len(cases)} cases, fitting on {len(fit_on)}, holding "
                         f"out {len(held_out)}; {len(unread)} row(s) unreadable"))
    with tempfile.TemporaryDirectory(prefix="batchsim-engine-fit-") as workdir:
        fit = fit_engine(base, fit_on, held_out, client, Path(workdir), jobs=jobs,
                         on_stage=lambda line: console.print(escape(line)),
                         serial_starts=serial_starts, max_iterations=iterations, free=free)
    profile = fitted_profile(base, fit, data, backend, client, unread)
    write_profile(profile, base.text, out.expanduser())
    console.print(_error_table(profile.spec.calibration or {}))
    for row in [*unread, *fit.unreplayed]:
        console.print(f"not simulated: {escape(row.source)}: {escape(row.reason)}")
    console.print(f"wrote {escape(str(out))}")


def _error_table(calibration: dict[str, object]) -> Table:
    table = Table(title="simulated / measured − 1 with the fitted costs")
    for header in ("cases", "n", "TTFT median |err|", "TTFT p90 |err|", "TTFT bias",
                   "TPOT median |err|", "TPOT p90 |err|", "TPOT bias"):
        table.add_column(header, justify="left" if header == "cases" else "right")
    for label, key in (("fitted on", "fitted_on"), ("held out", "held_out")):
        record = calibration.get(key)
        if not isinstance(record, dict):
            continue
        cells = [label, str(record["cases"])]
        for metric in ("ttft", "tpot"):
            figures = record[metric]
            cells += [percent(figures[name]) for name in
                      ("median_abs_error", "p90_abs_error", "bias")]
        table.add_row(*cells)
    return table

