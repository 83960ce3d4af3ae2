"""What every lesson figure shares: the report's style, one row of panels, a log axis of
users or requests, one line per arm, bars of several arms side by side."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from batchsim.apps.report.style import WIDTH_IN, arm_colour, plain_number

PANEL_HEIGHT_IN = 3.6


def panels(count: int, title: str) -> tuple[Figure, Sequence[Axes]]:
    figure = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN), dpi=110, layout="constrained")
    axes = figure.subplots(1, count, squeeze=False)[0]
    figure.suptitle(title, fontsize=11)
    for axis in axes:
        axis.grid(True, color="0.9", linewidth=0.8)
        axis.set_axisbelow(True)
    return figure, list(axes)


def log_axis(axis: Axes, which: str = "x") -> None:
    """A log axis labelled with plain numbers (1, 10, 100), not powers of ten."""
    scale = axis.set_xscale if which == "x" else axis.set_yscale
    scale("log")
    target = axis.xaxis if which == "x" else axis.yaxis
    target.set_major_formatter(FuncFormatter(plain_number))


def grouped_bars(axis: Axes, groups: Sequence[str], series: dict[str, Sequence[float]],
                 labels: str = "{:.3g}") -> None:
    """Bars of each series side by side within each group (arms within a metric, or metrics
    within an arm), each series in its report colour and labelled with its value, so the
    figure can be read without the table."""
    width = 0.8 / max(len(series), 1)
    for index, (name, values) in enumerate(series.items()):
        offsets = [group + (index - (len(series) - 1) / 2) * width for group in range(len(groups))]
        bars = axis.bar(offsets, values, width, color=arm_colour(index), label=name)
        axis.bar_label(bars, [labels.format(value) for value in values], fontsize=7, padding=1)
    axis.set_xticks(range(len(groups)), groups)
    axis.grid(False, axis="x")


def arm_lines(axis: Axes, rows: pd.DataFrame, x: str, y: str, scale: float = 1.0) -> None:
    """One line per arm of `y` (times `scale`, for units) against the swept column `x`, in
    each arm's report colour, arms in the order the experiment lists them."""
    for index, (arm, points) in enumerate(rows.groupby("arm", sort=False)):
        axis.plot(points[x], points[y] * scale, marker="o", markersize=4,
                  color=arm_colour(index), label=str(arm))


def headroom(axis: Axes, factor: float = 1.12) -> None:
    """Start the y axis at 0 and leave room above the tallest bar for its value label (and
    a legend above the bars)."""
    axis.set_ylim(0, axis.get_ylim()[1] * factor)
