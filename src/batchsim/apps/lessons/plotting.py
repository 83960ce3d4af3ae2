"""What every lesson figure shares: the report's style, one row of panels, a log axis of
users or requests."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from batchsim.apps.report.style import WIDTH_IN, plain_number

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
