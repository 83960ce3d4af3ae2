"""Draw the Pareto front of each variant (base, what-ifs) into one PNG, two panels a row, from
plan.json's document (its `pareto` points and fronts), so `batchsim report` redraws it.

Each front point is labelled with its configuration, the text at 10 pt or more at the page's
width (the figure is the report's width, so the page shows it at its own size). Uses the
report's style (Agg canvas, fixed fonts, no date or version in the PNG), so the same
document gives the same bytes."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from batchsim.apps.report.style import WIDTH_IN, arm_colour, png_bytes, report_style

_COLUMNS = 2
_ROW_IN = 3.9
_LABEL_OFFSETS = ((6, 6), (6, -15))  # points: alternate above and below along the front


def pareto_arms(document: dict[str, Any]) -> list[str]:
    """Every arm with a point, in the order of the file's arms, then any a what-if adds."""
    named = [arm["name"] for arm in document["config"].get("policies", [])]
    seen = [p["arm"] for v in document["variants"] for p in v["pareto"]["points"]]
    return list(dict.fromkeys([a for a in named if a in seen] + seen))


def draw_pareto(document: dict[str, Any]) -> bytes:
    """One panel per variant with shared axes; colours by arm (`pareto_arms`)."""
    variants = document["variants"]
    arms = pareto_arms(document)
    rows = math.ceil(len(variants) / _COLUMNS)
    columns = min(len(variants), _COLUMNS)
    with report_style(large_text=True):
        figure = Figure(figsize=(WIDTH_IN, _ROW_IN * rows + 0.9))
        FigureCanvasAgg(figure)
        axes = figure.subplots(rows, columns, sharex=True, sharey=True, squeeze=False)
        for index, ax in enumerate(axes.flat):
            if index >= len(variants):
                ax.set_visible(False)
                continue
            _panel(ax, variants[index], arms)
            if index % columns == 0:
                ax.set_ylabel("output tokens/s per GPU")
            if index // columns == rows - 1 or index + columns >= len(variants):
                ax.set_xlabel("output tokens/s per user (1 / mean TPOT)")
                ax.xaxis.set_tick_params(labelbottom=True)
        figure.legend(handles=_legend_handles(arms), loc="upper center",
                      ncol=len(arms) + 1, frameon=False, bbox_to_anchor=(0.5, 1.0))
        height = figure.get_size_inches()[1]
        figure.subplots_adjust(left=0.85 / WIDTH_IN, right=1 - 0.2 / WIDTH_IN,
                               bottom=0.65 / height, top=1 - 0.55 / height, hspace=0.35,
                               wspace=0.12)
        return png_bytes(figure)


def _legend_handles(arms: list[str]) -> list[Line2D]:
    def dot(colour: str, label: str) -> Line2D:
        return Line2D([], [], color=colour, marker="o", linestyle="", label=label)

    return [*(dot(arm_colour(i), arm) for i, arm in enumerate(arms)),
            Line2D([], [], color="black", linewidth=1.0, label="Pareto front (labelled)")]


def _panel(ax: Axes, variant: dict[str, Any], arms: list[str]) -> None:
    points, front = variant["pareto"]["points"], variant["pareto"]["front"]
    for index, arm in enumerate(arms):
        mine = [p for p in points if p["arm"] == arm]
        ax.scatter([p["tokens_per_s_per_user"] for p in mine],
                   [p["tokens_per_s_per_gpu"] for p in mine], s=28, color=arm_colour(index),
                   zorder=3)
    users = [p["tokens_per_s_per_user"] for p in front]
    ax.plot(users, [p["tokens_per_s_per_gpu"] for p in front], color="black",
            linewidth=1.0, zorder=2)
    ax.margins(x=0.25, y=0.15)  # room for the labels of the points at the ends
    low, high = ax.get_xlim()
    for index, point in enumerate(front):
        dx, dy = _LABEL_OFFSETS[index % len(_LABEL_OFFSETS)]
        # Near the right edge a label would run off the figure: it goes up and left instead.
        leftwards = point["tokens_per_s_per_user"] > low + 0.8 * (high - low)
        ax.annotate(_short_label(point["label"], variant), (point["tokens_per_s_per_user"],
                                                            point["tokens_per_s_per_gpu"]),
                    xytext=(-dx, 6) if leftwards else (dx, dy), textcoords="offset points",
                    ha="right" if leftwards else "left", fontsize=10, zorder=4)
    ax.set_title(f"{variant['name']}: {len(points)} configurations meet the SLO", loc="left")


def _short_label(label: str, variant: dict[str, Any]) -> str:
    """The label without the GPU kind when every configuration of the variant has one kind
    (the panel's title and the tables say which)."""
    kinds = {k for row in (variant.get("candidates") or {}).get("ranked", [])
             for k in row.get("gpus_by_hardware", {})}
    if len(kinds) == 1:
        return label.replace(f" {next(iter(kinds))}", "")
    return label
