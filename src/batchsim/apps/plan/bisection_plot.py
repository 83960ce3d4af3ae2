"""The max-rate bisections as evidence: the judged p99 of every SLO target against the load,
one row of panels per variant and one column per target, a line per arm through the loads it
tried, filled where the run met the SLO and hollow where it missed (a miss can be a growing
queue with p99s under the targets), and the target as a dashed line.

Drawn from the steps plan.json keeps (each with its judged p99s), so `batchsim report`
redraws it and the same document gives the same bytes.
"""

from __future__ import annotations

from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from batchsim.apps.plan.durations import latency_text
from batchsim.apps.plan.evaluate import MEETS
from batchsim.apps.report.style import WIDTH_IN, arm_colour, png_bytes, report_style

_ROW_IN = 2.6
_SLO_LABELS = {"ttft_p99_s": "TTFT", "tpot_p99_s": "TPOT", "e2e_p99_s": "E2E"}
LATENCY = FuncFormatter(lambda value, _position: latency_text(value))
_MINUTES = (60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0, 7200.0, 18000.0)
_FINE_TICKS = (*(m * 10.0 ** e for e in range(-4, 2) for m in (1, 2, 5)), *_MINUTES)
_COARSE_TICKS = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 36000.0)


def _targets(document: dict[str, Any]) -> list[str]:
    return [key for key, value in document["slo"].items() if value is not None]


def draw_bisections(document: dict[str, Any]) -> bytes | None:
    """PNG bytes of every variant's bisections; None when the plan bisects nothing."""
    variants = [v for v in document["variants"] if v["max_rate"]]
    targets = _targets(document)
    if not variants or not targets:
        return None
    arms = list(dict.fromkeys(e["arm"] for v in variants for e in v["max_rate"]))
    with report_style(large_text=True):
        figure = Figure(figsize=(WIDTH_IN, _ROW_IN * len(variants) + 1.2))
        FigureCanvasAgg(figure)
        grid = figure.subplots(len(variants), len(targets), sharex=True, sharey="col",
                               squeeze=False)
        for row, variant in zip(grid, variants, strict=True):
            for ax, target in zip(row, targets, strict=True):
                _panel(ax, variant, target, document["slo"][target], arms)
                ax.set_title(f"{variant['name']}: {_SLO_LABELS.get(target, target)} p99",
                             loc="left")
        for ax in grid.flat:  # after every panel is drawn: the shared limits are final
            _latency_ticks(ax)
        for ax in grid[-1]:
            ax.set_xlabel(_load_label(str(document["load_parameter"])))
        figure.legend(handles=_legend(arms), loc="upper center", ncol=len(arms) + 3,
                      frameon=False, bbox_to_anchor=(0.5, 1.0))
        height = figure.get_size_inches()[1]
        figure.subplots_adjust(left=0.9 / WIDTH_IN, right=1 - 0.2 / WIDTH_IN,
                               bottom=0.65 / height, top=1 - 0.55 / height, hspace=0.45,
                               wspace=0.2)
        return png_bytes(figure)


def _panel(ax: Axes, variant: dict[str, Any], target: str, bound: float,
           arms: list[str]) -> None:
    for entry in variant["max_rate"]:
        colour = arm_colour(arms.index(entry["arm"]))
        # A step without a finite p99 (every request rejected) has no point to draw.
        points = sorted((step["load"], value, step["status"] == MEETS)
                        for step in entry["steps"]
                        if (value := _judged(step, target)) is not None)
        ax.plot([p[0] for p in points], [p[1] for p in points], color=colour,
                linewidth=1.2, zorder=2)
        for load, value, meets in points:
            ax.plot([load], [value], marker="o", markersize=6, color=colour,
                    markerfacecolor=colour if meets else "white", zorder=3)
    ax.axhline(bound, color="black", linestyle="--", linewidth=1.0, zorder=1)
    ax.set_yscale("log")


def _latency_ticks(ax: Axes) -> None:
    """Ticks at round latencies (100 ms, 1 s, 1 min) rather than powers of ten of seconds,
    1-2-5 within two decades and one a decade beyond."""
    low, high = ax.get_ylim()
    fine = high / low <= 150
    ticks = [tick for tick in (_FINE_TICKS if fine else _COARSE_TICKS) if low <= tick <= high]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(LATENCY)
    ax.yaxis.set_minor_locator(NullLocator())


def _load_label(parameter: str) -> str:
    return "arrival rate (req/s)" if parameter.endswith("arrivals.rate") else parameter


def _judged(step: dict[str, Any], target: str) -> float | None:
    p99 = (step.get("p99") or {}).get(target) or {}
    value = p99.get("judged")
    return float(value) if value is not None and value > 0 else None


def _legend(arms: list[str]) -> list[Line2D]:
    lines = [Line2D([], [], color=arm_colour(i), marker="o", label=arm)
             for i, arm in enumerate(arms)]
    return [*lines,
            Line2D([], [], color="grey", marker="o", linestyle="", label="meets the SLO"),
            Line2D([], [], color="grey", marker="o", markerfacecolor="white", linestyle="",
                   label="misses it"),
            Line2D([], [], color="black", linestyle="--", label="SLO target")]
