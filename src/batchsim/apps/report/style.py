"""One look for every report figure, and PNG bytes that do not change between runs.

Figures are `matplotlib.figure.Figure` objects drawn with the Agg canvas, never pyplot: no
global figure registry, no backend switch for whoever imports us. The style starts from
matplotlib's defaults so a user's matplotlibrc cannot change the report's bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import matplotlib as mpl
import matplotlib.style
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from matplotlib.typing import LineStyleType

WIDTH_IN = 10.0  # every figure is this wide: 1100 px at DPI, the page's column width
DPI = 110

_RC: dict[Any, Any] = {  # Any: mypy wants literal rcParams keys
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyphs on every machine
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "svg.hashsalt": "batchsim",  # no random ids, should anyone save these as SVG
}

# Colour-blind-safe (Okabe-Ito), in a fixed order: arm i has the same colour in every figure.
_PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
            "#000000")
_DASHES: tuple[LineStyleType, ...] = ("-", "--", ":", "-.")
_LEGEND_COLUMNS = 4
_LEGEND_ROW_IN = 0.2


# For figures read at a glance at the page's width (the plan's): no text below 10 pt.
_LARGE_TEXT_RC: dict[Any, Any] = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11,
                                  "legend.fontsize": 10, "xtick.labelsize": 10,
                                  "ytick.labelsize": 10}


@contextmanager
def report_style(*, large_text: bool = False) -> Iterator[None]:
    with mpl.style.context("default"), mpl.rc_context(_RC), \
            mpl.rc_context(_LARGE_TEXT_RC if large_text else {}):
        yield


def arm_colour(index: int) -> str:
    return _PALETTE[index % len(_PALETTE)]


def arm_dash(index: int) -> LineStyleType:
    """Past eight arms colours repeat, so the line style tells them apart."""
    return _DASHES[(index // len(_PALETTE)) % len(_DASHES)]


def png_bytes(figure: Figure) -> bytes:
    """The figure as PNG; no Software/date chunks, so equal figures give equal bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def figure_legend(figure: Figure, handles: Sequence[Artist], *, titled: bool = True) -> None:
    """One legend above all panels (they share colours), then fixed margins around them.

    Margins are set in inches rather than by tight_layout: it measures every label by drawing
    the figure, which took most of the report's time, and fixed margins look the same for
    every run.
    """
    columns = min(len(handles), _LEGEND_COLUMNS)
    figure.legend(handles=list(handles), loc="upper center", ncol=columns, frameon=False,
                  bbox_to_anchor=(0.5, 1.0))
    rows = -(-len(handles) // _LEGEND_COLUMNS)
    width, height = figure.get_size_inches()
    top_in = 0.12 + _LEGEND_ROW_IN * rows + (0.3 if titled else 0.05)
    figure.subplots_adjust(left=0.85 / width, right=1.0 - 0.15 / width, bottom=0.7 / height,
                           top=1.0 - top_in / height, wspace=0.3, hspace=0.35 if titled else 0.1)


def plain_number(value: float, _position: object = None) -> str:
    """Tick labels like 0.01, 1, 100 rather than 10^-2 (log axes of latency)."""
    return f"{value:,g}"


PLAIN = FuncFormatter(plain_number)


def twos_and_fives(value: float, _position: object = None) -> str:
    """Minor log ticks labelled at 2× and 5× a power of ten, for axes of a decade or two."""
    mantissa = value / 10 ** math.floor(math.log10(value)) if value > 0 else 0.0
    return plain_number(value) if round(mantissa, 6) in (2.0, 5.0) else ""


TWOS_AND_FIVES = FuncFormatter(twos_and_fives)
