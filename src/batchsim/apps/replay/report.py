"""The replay's report.html: predicted against measured, case by case, and the error table.

Drawn from the per-case table alone (replay.parquet's columns), so the page and the files
never disagree; the PNGs are embedded and also written to plots/.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.replay.score import (
    EXTRA_FIGURES,
    SUMMARY_HEADERS,
    figure_summary,
    percent,
    summary_cells,
)
from batchsim.apps.report.figures import Drawing, NoPlot, PlotSpec, render_plots
from batchsim.apps.report.page import html_document, plot_section
from batchsim.apps.report.style import PLAIN, arm_colour, figure_legend

REPORT_HTML = "report.html"
_BAND = 0.2  # the ±20% band drawn around "simulated = measured"


def _scatter(cases: pd.DataFrame, metric: str, unit: float, label: str) -> Drawing:
    if cases.empty:
        raise NoPlot("no case was simulated")
    figure = Figure(figsize=(6.4, 5.2))
    axes = figure.add_subplot()
    measured = cases[f"measured_{metric}_s"].to_numpy() * unit
    simulated = cases[f"simulated_{metric}_s"].to_numpy() * unit
    low = min(measured.min(), simulated.min()) / 1.5
    high = max(measured.max(), simulated.max()) * 1.5
    line = np.array([low, high])
    axes.fill_between(line, line * (1 - _BAND), line * (1 + _BAND), color="0.9", lw=0)
    axes.plot(line, line, color="0.4", lw=1)
    handles = []
    for index, engine in enumerate(sorted(cases["engine"].unique())):
        mine = (cases["engine"] == engine).to_numpy()
        handles.append(axes.scatter(measured[mine], simulated[mine], s=14, alpha=0.7,
                                    color=arm_colour(index), label=engine))
    axes.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
             xlabel=f"measured mean {label}", ylabel=f"simulated mean {label}")
    axes.xaxis.set_major_formatter(PLAIN)
    axes.yaxis.set_major_formatter(PLAIN)
    figure_legend(figure, handles, titled=False)
    return Drawing(figure)


def _error_by_concurrency(cases: pd.DataFrame) -> Drawing:
    if cases.empty:
        raise NoPlot("no case was simulated")
    figure = Figure(figsize=(9.6, 4.0))
    handles = []
    for column, (metric, label) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
        axes = figure.add_subplot(1, 2, column + 1)
        axes.axhline(0.0, color="0.4", lw=1)
        for index, engine in enumerate(sorted(cases["engine"].unique())):
            mine = cases[cases["engine"] == engine]
            dots = axes.scatter(mine["concurrency"], mine[f"{metric}_error"] * 100, s=12,
                                alpha=0.7, color=arm_colour(index), label=engine)
            if column == 0:
                handles.append(dots)
        axes.set(xscale="log", xlabel="concurrent requests",
                 ylabel=f"{label}: simulated / measured − 1 (%)")
        axes.xaxis.set_major_formatter(PLAIN)
    figure_legend(figure, handles, titled=False)
    return Drawing(figure)


def _figure_errors(cases: pd.DataFrame) -> Drawing:
    """The error of each further figure the inputs report (per-request JSON results): one
    row per figure, one dot per case."""
    figures = [f for f in EXTRA_FIGURES if f"{f}_error" in cases]
    if not figures:
        raise NoPlot("the inputs report mean TTFT and TPOT only (aggregate rows)")
    figure = Figure(figsize=(8.0, 0.42 * len(figures) + 1.4))
    axes = figure.add_subplot()
    axes.axvspan(-_BAND * 100, _BAND * 100, color="0.9", lw=0)
    axes.axvline(0.0, color="0.4", lw=1)
    for row, name in enumerate(figures):
        errors = cases[f"{name}_error"].to_numpy(dtype=float) * 100
        errors = errors[~np.isnan(errors)]
        axes.scatter(errors, np.full(errors.size, row), s=14, alpha=0.7, color=arm_colour(0))
    axes.set_yticks(range(len(figures)), figures)
    axes.invert_yaxis()
    axes.set(xlabel="simulated / measured − 1 (%)")
    figure.tight_layout()
    return Drawing(figure)


PLOTS: list[PlotSpec[pd.DataFrame]] = [
    PlotSpec("replay_ttft", "Mean TTFT, simulated against measured",
             "One dot per case, coloured by engine; the grey band is ±20%. Dots below the "
             "diagonal: the simulator is too fast.",
             lambda cases: _scatter(cases, "ttft", 1000.0, "TTFT (ms)")),
    PlotSpec("replay_tpot", "Mean TPOT, simulated against measured",
             "One dot per case, coloured by engine; the grey band is ±20%.",
             lambda cases: _scatter(cases, "tpot", 1000.0, "TPOT (ms)")),
    PlotSpec("replay_error_by_concurrency", "Error against concurrency",
             "Where the error comes from: a per-request cost shows at few users, engine "
             "overheads and scheduling at many.", _error_by_concurrency),
    PlotSpec("replay_figures", "Every figure the results report: the error",
             "Per-request results (vllm bench serve, SGLang, AIPerf) give percentiles, ITL, "
             "E2E and throughput: one row each, one dot per case, the grey band ±20%.",
             _figure_errors),
]


def _summary_html(summary: pd.DataFrame) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in SUMMARY_HEADERS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in summary_cells(row))
                   + "</tr>" for row in summary.to_dict("records"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _figures_html(cases: pd.DataFrame) -> str:
    figures = figure_summary(cases)
    if figures.empty:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("figure", "cases", "median |err|", "p90 |err|",
                                              "bias"))
    rows = "".join(
        f"<tr><td>{escape(str(row['figure']))}</td><td>{row['cases']}</td>"
        + "".join(f"<td>{escape(percent(row[key]))}</td>"
                  for key in ("median_abs", "p90_abs", "median_signed")) + "</tr>"
        for row in figures.to_dict("records"))
    return ("<h2>Every figure the results report</h2>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")


def write_replay_report(out: Path, cases: pd.DataFrame, summary: pd.DataFrame,
                        not_simulated: int) -> Path:
    """report.html and plots/*.png of one replay."""
    plots = render_plots(PLOTS, cases)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for plot in plots:
        if plot.png is not None:
            (out / "plots" / f"{plot.spec.name}.png").write_bytes(plot.png)
    body = ["<h1>batchsim replay: simulated against measured</h1>",
            "<p class=\"context\">Error = simulated / measured − 1 of each case's mean; "
            f"{not_simulated} row(s) were not simulated (replay.json lists each with its "
            "reason).</p>", _summary_html(summary), _figures_html(cases),
            *(plot_section(p) for p in plots),
            "<footer>Built from replay.parquet and replay.json in this folder.</footer>"]
    path = out / REPORT_HTML
    path.write_text(html_document("batchsim replay", body), encoding="utf-8")
    return path
