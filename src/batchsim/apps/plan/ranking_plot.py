"""The plan's lead figure: the ranked configurations of the base variant as bars of what each
costs, those that meet the SLO coloured by arm and those that miss grey, each with its judged
p99s or what it missed written beside it. One glance answers which layout, how many GPUs and
at what cost, and how much the runners-up differ.

Drawn from plan.json's document alone (so `batchsim report` redraws it), in the report's
style: the same document gives the same bytes.
"""

from __future__ import annotations

from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from batchsim.apps.plan.answer_text import load_text
from batchsim.apps.plan.evaluate import DOES_NOT_FIT, MEETS
from batchsim.apps.plan.tables import p99_cell
from batchsim.apps.report.style import WIDTH_IN, arm_colour, png_bytes, report_style

SHOWN = 10  # bars: the best ten read at a glance; the tables below have every one
_BAR_IN = 0.3
_MARGINS_IN = 1.8
_MISSES_GREY = "#bbbbbb"
_UNITS = {"gpus": "GPUs", "gpu_hours": "GPU-hours"}
_SLO_LABELS = {"ttft_p99_s": "TTFT", "tpot_p99_s": "TPOT", "e2e_p99_s": "E2E"}


def ranked_rows(variant: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str, str] | None:
    """(what is ranked, the rows that fit in rank order, the cost key, its axis label) of the
    variant's candidates, else of its fleets; None when it has neither."""
    if variant.get("candidates"):
        kind, rows = "candidates", variant["candidates"]["ranked"]
        priced = any(row["usd_per_hour"] for row in rows)
        key, label = ("usd_per_hour", "$ per hour") if priced else ("gpus", "GPUs")
    elif variant.get("autoscaling"):
        kind, rows = "fleets", variant["autoscaling"]["ranked"]
        priced = any(row["usd"] is not None for row in rows)
        key, label = ("usd", "$ paid over the run") if priced else ("gpu_hours", "GPU-hours")
    else:
        return None
    return kind, [row for row in rows if row["status"] != DOES_NOT_FIT], key, label


def draw_ranking(document: dict[str, Any]) -> bytes | None:
    """The base variant's ranking as PNG bytes; None when the plan ranks nothing."""
    found = ranked_rows(document["variants"][0])
    if found is None or not found[1]:
        return None
    kind, rows, key, label = found
    shown = rows[:SHOWN]
    arms = list(dict.fromkeys(row["arm"] for row in rows))
    with report_style(large_text=True):
        figure = Figure(figsize=(WIDTH_IN, _BAR_IN * len(shown) + _MARGINS_IN))
        FigureCanvasAgg(figure)
        ax = figure.subplots()
        _bars(ax, shown, key, arms)
        ax.set_xlabel(label)
        ax.set_title(_title(document, kind, len(shown), len(rows)), loc="left")
        handles = [Patch(color=arm_colour(i), label=arm) for i, arm in enumerate(arms)]
        handles.append(Patch(color=_MISSES_GREY, label="misses the SLO"))
        figure.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False,
                      bbox_to_anchor=(0.5, 0.0))
        height = figure.get_size_inches()[1]
        figure.subplots_adjust(left=2.6 / WIDTH_IN, right=1 - 0.2 / WIDTH_IN,
                               bottom=1.0 / height, top=1 - 0.45 / height)
        return png_bytes(figure)


def _title(document: dict[str, Any], kind: str, shown: int, fitting: int) -> str:
    candidates = document["variants"][0].get("candidates")
    where = (f"Candidates at {load_text(document, candidates['target_rate'])}"
             if kind == "candidates" else "Fleets on the file's own traffic")
    more = f", the best {shown} of {fitting} that fit" if shown < fitting else ""
    return f"{where}, ranked{more}"


def _bars(ax: Axes, rows: list[dict[str, Any]], key: str, arms: list[str]) -> None:
    values = [float(row[key] or 0.0) for row in rows]
    colours = [arm_colour(arms.index(row["arm"])) if row["status"] == MEETS else _MISSES_GREY
               for row in rows]
    positions = list(range(len(rows)))
    ax.barh(positions, values, color=colours, height=0.7)
    ax.set_yticks(positions, [f"{row['rank']}. {row['label']}" for row in rows])
    ax.invert_yaxis()  # rank 1 on top
    ax.grid(axis="y", visible=False)
    top = max(values) if values else 1.0
    ax.set_xlim(0, top * 1.9)  # room for the text beside the longest bar
    for position, value, row in zip(positions, values, rows, strict=True):
        ax.text(value + top * 0.02, position, _bar_text(row, key), va="center", fontsize=10)


def _bar_text(row: dict[str, Any], key: str) -> str:
    """`$24.00 · TTFT 647 ms, TPOT 73.3 ms` for one that meets; `$6.00 · misses TPOT, queue`
    for one that does not."""
    value = row[key]
    cost = (f"${value:,.2f}" if key.startswith("usd") else f"{value:,g} {_UNITS[key]}")
    if row["status"] != MEETS:
        return f"{cost} · misses " + ", ".join(row.get("missed") or [row["status"]])
    return f"{cost} · " + ", ".join(f"{_SLO_LABELS.get(target, target)} "
                                    f"{p99_cell(row, target)}" for target in row.get("p99") or {})
