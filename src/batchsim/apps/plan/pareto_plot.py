"""Draw the Pareto front of each variant (base, what-ifs) side by side into one PNG.

Uses the report's style (Agg canvas, fixed fonts, no date or version in the PNG), so the same
plan gives the same bytes."""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from batchsim.apps.plan.pareto import ParetoPoint
from batchsim.apps.report.style import arm_colour, figure_legend, png_bytes, report_style

_PANEL_IN = 4.2


def draw_pareto(panels: list[tuple[str, list[ParetoPoint], list[ParetoPoint]]],
                arms: list[str], path: Path) -> Path:
    """One panel per (title, points, front) sharing axes; colours by arm, in `arms` order.
    The points are the configurations that meet the SLO."""
    with report_style():
        figure = Figure(figsize=(_PANEL_IN * len(panels) + 0.6, _PANEL_IN + 1.0))
        FigureCanvasAgg(figure)
        axes = figure.subplots(1, len(panels), sharex=True, sharey=True, squeeze=False)[0]
        for ax, (title, points, front) in zip(axes, panels, strict=True):
            _panel(ax, title, points, front, arms)
        axes[0].set_ylabel("output tokens/s per GPU")
        figure_legend(figure, _legend_handles(arms))
        path.write_bytes(png_bytes(figure))
    return path


def _legend_handles(arms: list[str]) -> list[Line2D]:
    def dot(colour: str, label: str) -> Line2D:
        return Line2D([], [], color=colour, marker="o", linestyle="", label=label)

    return [*(dot(arm_colour(i), arm) for i, arm in enumerate(arms)),
            Line2D([], [], color="black", linewidth=1.0, label="Pareto front")]


def _panel(ax: Axes, title: str, points: list[ParetoPoint], front: list[ParetoPoint],
           arms: list[str]) -> None:
    for index, arm in enumerate(arms):
        mine = [p for p in points if p.arm == arm]
        ax.scatter([p.tokens_per_s_per_user for p in mine],
                   [p.tokens_per_s_per_gpu for p in mine], s=18, color=arm_colour(index),
                   zorder=3)
    ax.plot([p.tokens_per_s_per_user for p in front], [p.tokens_per_s_per_gpu for p in front],
            color="black", linewidth=1.0, zorder=1)
    ax.set_title(title)
    ax.set_xlabel("output tokens/s per user (1 / mean TPOT)")
