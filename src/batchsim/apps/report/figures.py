"""What a report plot is, and how a list of them is drawn into PNG bytes.

Each plot is a `PlotSpec`: a file name, a title, a caption saying what to look for, and a
`draw` function from the results folder to a `Drawing`. A draw function that lacks its data
raises `NoPlot` with the reason, and the page prints that reason where the plot would be, so a
missing column costs one plot, never the report. Single-run plots live in `latency_plots` and
`timeline_plots` and draw a `RunResults`; sweep curves (per-point metrics vs the swept value)
live in `sweep_plots` and draw a `SweepResults`, placed by the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from matplotlib.figure import Figure

from batchsim.apps.report.style import png_bytes, report_style

Results = TypeVar("Results")  # what a plot is drawn from: RunResults or SweepResults


class NoPlot(Exception):
    """The data a plot needs is not in the results folder; the message says what is missing."""


@dataclass(slots=True)
class Drawing:
    figure: Figure
    notes: list[str] = field(default_factory=list)  # parts left out, and why


@dataclass(frozen=True, slots=True)
class PlotSpec(Generic[Results]):
    name: str  # plots/<name>.png
    title: str
    caption: str  # what to look for, shown under the title
    draw: Callable[[Results], Drawing]


@dataclass(frozen=True, slots=True)
class RenderedPlot:
    spec: PlotSpec[Any]  # only its name, title and caption are read
    png: bytes | None  # None: not drawn, `notes` says why
    notes: list[str]


def render_plots(specs: Sequence[PlotSpec[Results]], results: Results) -> list[RenderedPlot]:
    rendered = []
    with report_style():
        for spec in specs:
            try:
                drawing = spec.draw(results)
            except NoPlot as reason:
                rendered.append(RenderedPlot(spec, None, [str(reason)]))
                continue
            rendered.append(RenderedPlot(spec, png_bytes(drawing.figure), drawing.notes))
    return rendered
