"""Build a results folder's report: read it, draw the plots, write report.html and plots/."""

from __future__ import annotations

from pathlib import Path

from batchsim.report.figures import PlotSpec, render_plots
from batchsim.report.latency_plots import LATENCY_CDFS, LATENCY_PERCENTILES
from batchsim.report.page import render_page
from batchsim.report.results import load_results
from batchsim.report.timeline_plots import TIMELINES

REPORT_FILE = "report.html"
PLOTS_DIR = "plots"

# The plots of a single run, in page order. Sweep curves will be a second tuple, chosen when
# the summary's rows carry sweep points.
SINGLE_RUN_PLOTS: tuple[PlotSpec[RunResults], ...] = (LATENCY_CDFS, LATENCY_PERCENTILES, TIMELINES)


def write_report(folder: Path) -> Path:
    """Write FOLDER/report.html and FOLDER/plots/*.png from the files already in FOLDER."""
    results = load_results(folder)
    plots = render_plots(SINGLE_RUN_PLOTS, results)
    plots_dir = folder / PLOTS_DIR
    plots_dir.mkdir(exist_ok=True)
    for plot in plots:
        png = plots_dir / f"{plot.spec.name}.png"
        if plot.png is not None:
            png.write_bytes(plot.png)
        else:  # a plot from an earlier report of this folder would contradict the page
            png.unlink(missing_ok=True)
    report = folder / REPORT_FILE
    report.write_text(render_page(results, plots), encoding="utf-8")
    return report
