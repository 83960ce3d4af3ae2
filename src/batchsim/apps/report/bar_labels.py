"""Numbers above bars that never overlap: turned upright where they are wider than the bars
they label, with the axis raised until the tallest fits inside the panel.

Measured with the Agg renderer once the figure's margins are set, since whether a number fits
depends on the panel's final width in pixels, not on the data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

_HEADROOM = 1.04  # the tallest label's top this far into the raised axis, not on its edge


def fit_bar_labels(figure: Figure, panels: Sequence[tuple[Axes, Sequence[Text]]]) -> None:
    """For each panel: labels upright when any two side by side would overlap, then the y axis
    raised until every label is inside the panel."""
    renderer = FigureCanvasAgg(figure).get_renderer()
    for axis, labels in panels:
        shown = [label for label in labels if label.get_text()]
        if not shown:
            continue
        if _any_overlap(shown, renderer):
            for label in shown:
                label.set_rotation(90)
        _raise_top(axis, shown, renderer)


def _any_overlap(labels: Sequence[Text], renderer: RendererBase) -> bool:
    boxes = [label.get_window_extent(renderer) for label in labels]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _raise_top(axis: Axes, labels: Sequence[Text], renderer: RendererBase) -> None:
    """Raise the y limit (in the axis' own scale, linear or log) so the labels fit below it."""
    panel = axis.get_window_extent(renderer)
    top = max(label.get_window_extent(renderer).y1 for label in labels)
    if top <= panel.y1:
        return
    share = (top - panel.y0) / panel.height * _HEADROOM
    scale = axis.yaxis.get_transform()  # data → the axis' linear space (log10 on a log axis)
    low, high = scale.transform(np.array(axis.get_ylim()))
    raised = scale.inverted().transform(np.array([low, low + (high - low) * share]))[1]
    axis.set_ylim(top=float(raised))
