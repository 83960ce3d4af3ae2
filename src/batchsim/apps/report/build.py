"""Build a results folder's report: read it, draw the plots, write report.html and plots/.

A single run's folder gets the comparison table, latency and timeline plots; a sweep's folder
(its summary.json has a `"sweep"` key) gets the curves of every metric against the swept
value and the per-point table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from batchsim.apps.report.figures import PlotSpec, RenderedPlot, render_plots
from batchsim.apps.report.latency_plots import LATENCY_CDFS, LATENCY_PERCENTILES
from batchsim.apps.report.page import render_page
from batchsim.apps.report.results import RunResults, load_results, read_summary
from batchsim.apps.report.sweep_page import render_sweep_page
from batchsim.apps.report.sweep_plots import SWEEP_PLOTS
from batchsim.apps.report.sweep_results import is_sweep, load_sweep
from batchsim.apps.report.timeline_plots import TIMELINES
from batchsim.experiment.output_folder import naming, write_text

REPORT_FILE = "report.html"
PLOTS_DIR = "plots"

# The plots of a single run, in page order; a sweep's are sweep_plots.SWEEP_PLOTS.
SINGLE_RUN_PLOTS: tuple[PlotSpec[RunResults], ...] = (LATENCY_CDFS, LATENCY_PERCENTILES,
                                                     TIMELINES)


def write_report(folder: Path, into: Path | None = None,
                 summary: dict[str, Any] | None = None) -> Path:
    """Write report.html and plots/*.png from the files in FOLDER, into INTO (a staging folder,
    to be moved into FOLDER) or else into FOLDER itself. `summary` is FOLDER's summary.json
    when the caller has it elsewhere (a sweep's own, still in its staging folder)."""
    if summary is None:
        summary = read_summary(folder)
    if is_sweep(summary):
        sweep = load_sweep(folder, summary)
        plots = render_plots(SWEEP_PLOTS, sweep)
        page = render_sweep_page(sweep, plots)
    else:
        results = load_results(folder, summary)
        plots = render_plots(SINGLE_RUN_PLOTS, results)
        page = render_page(results, plots)
    into = folder if into is None else into
    _write_plots(into / PLOTS_DIR, plots)
    report = into / REPORT_FILE
    write_text(report, page)
    return report


def _write_plots(plots_dir: Path, plots: list[RenderedPlot]) -> None:
    plots_dir.mkdir(exist_ok=True)
    for plot in plots:
        png = plots_dir / f"{plot.spec.name}.png"
        if plot.png is not None:
            with naming(png):
                png.write_bytes(plot.png)
        else:  # a plot from an earlier report of this folder would contradict the page
            png.unlink(missing_ok=True)
