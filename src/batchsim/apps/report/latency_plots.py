"""Latency plots per arm: CDFs from requests.parquet and percentile bars from summary.json."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import blended_transform_factory

from batchsim.apps.report.bar_labels import fit_bar_labels
from batchsim.apps.report.figures import Drawing, NoPlot, PlotSpec
from batchsim.apps.report.results import REQUESTS_FILE, RunResults
from batchsim.apps.report.style import (
    PLAIN,
    TWOS_AND_FIVES,
    WIDTH_IN,
    arm_colour,
    arm_dash,
    figure_legend,
)


@dataclass(frozen=True, slots=True)
class Latency:
    column: str  # in requests.parquet and summary.json, in seconds
    short: str
    long: str
    unit: str
    scale: float  # seconds → unit


LATENCIES = (
    Latency("ttft_s", "TTFT", "time to first token", "s", 1.0),
    Latency("tpot_s", "TPOT", "time per output token", "ms", 1000.0),
    Latency("e2e_s", "E2E", "end-to-end latency", "s", 1.0),
)
PERCENTILES = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"))
_LOG_SPREAD = 20.0  # a latency axis goes logarithmic when its values span more than this
_FEW_DECADES = 300.0  # up to this spread a log axis has one or two labelled powers of ten
_MAX_CDF_POINTS = 4000  # enough for a smooth step line; keeps big traces quick to draw
_SLO_STYLE: dict[str, Any] = {"color": "0.35", "linestyle": (0, (4, 3)), "linewidth": 1.0}
_SLO_REACH = 3.0  # a target further than this from the data is written, not drawn


def _slo_marker(axis: Axes, results: RunResults, latency: Latency, drawn: list[float],
                horizontal: bool) -> str:
    """Draw the SLO target as a dashed line, or, when it is far from every arm's values,
    return a sentence saying where it is: drawing it would squash the data into a sliver."""
    target = results.slo_target(latency.column)
    if target is None or not drawn:
        return ""
    value = target * latency.scale
    if min(drawn) / _SLO_REACH <= value <= max(drawn) * _SLO_REACH:
        line = axis.axvline if horizontal else axis.axhline
        line(value, **_SLO_STYLE)
        return ""
    side = "above" if value > max(drawn) else "below"
    return f"SLO target {value:,g} {latency.unit}: {side} every value"


def _axis_scale(axis: Axes, values: list[float], horizontal: bool) -> str:
    """Log when the arms differ by orders of magnitude (static vs continuous TTFT)."""
    positive = [v for v in values if v > 0]
    if not positive or max(positive) / min(positive) <= _LOG_SPREAD:
        return ""
    scaled = axis.xaxis if horizontal else axis.yaxis
    (axis.set_xscale if horizontal else axis.set_yscale)("log")
    scaled.set_major_formatter(PLAIN)
    if max(positive) / min(positive) <= _FEW_DECADES:  # one or two labels only: add 2s and 5s
        scaled.set_minor_formatter(TWOS_AND_FIVES)
    return ", log scale"


def _cdf_points(values: np.ndarray, denominator: int) -> tuple[np.ndarray, np.ndarray]:
    ordered = np.sort(values)
    fraction = np.arange(1, ordered.size + 1) / denominator
    if ordered.size > _MAX_CDF_POINTS:  # evenly in rank, always keeping the maximum
        keep = np.unique(np.linspace(0, ordered.size - 1, _MAX_CDF_POINTS).astype(np.int64))
        ordered, fraction = ordered[keep], fraction[keep]
    return ordered, fraction


def _arm_samples(results: RunResults, arm: str, latency: Latency) -> tuple[np.ndarray, int]:
    """The arm's measured values of one latency, and the CDF's denominator.

    Rejected requests have no latency but stay in the denominator, so a curve that levels off
    below 1 shows the share rejected. Finished requests without a value (the TPOT of a
    one-token answer) are left out of both.
    """
    frame = results.measured_requests(arm)
    if frame is None or latency.column not in frame.columns:
        return np.zeros(0), 0
    values = frame[latency.column].to_numpy(dtype=float) * latency.scale
    missing = np.isnan(values)
    if "finished" in frame.columns:
        undefined = int((missing & frame["finished"].to_numpy(dtype=bool)).sum())
    else:
        undefined = 0
    return values[~missing], values.size - undefined


def _cdf_panel(axis: Axes, results: RunResults, latency: Latency) -> None:
    drawn: list[float] = []
    for index, arm in enumerate(results.arms):
        values, denominator = _arm_samples(results, arm.name, latency)
        if values.size == 0:
            continue
        x, y = _cdf_points(values, denominator)
        axis.plot(x, y, drawstyle="steps-post", color=arm_colour(index),
                  linestyle=arm_dash(index), linewidth=1.4)
        drawn += [float(x[0]), float(x[-1])]
    slo_note = _slo_marker(axis, results, latency, drawn, horizontal=True)
    if not drawn:
        axis.text(0.5, 0.5, "no finished requests", ha="center", va="center",
                  transform=axis.transAxes)
    log = _axis_scale(axis, drawn, horizontal=True)
    axis.axhline(0.99, color="0.6", linewidth=0.6, linestyle=":")
    xlabel = f"{latency.short} ({latency.unit}{log})" + (f"\n{slo_note}" if slo_note else "")
    axis.set(ylim=(0, 1.02), title=latency.long, xlabel=xlabel)


def _arm_handles(results: RunResults, bars: bool) -> list[Line2D | Patch]:
    """One legend entry per arm, with its finished and rejected counts: the plots show only
    finished requests, so the legend says how many were turned away."""
    handles: list[Line2D | Patch] = []
    for index, arm in enumerate(results.arms):
        done, rejected = arm.metrics.get("completed"), arm.metrics.get("rejected")
        label = f"{arm.label} ({_count(done)} finished, {_count(rejected)} rejected)"
        colour = arm_colour(index)
        handles.append(Patch(color=colour, label=label) if bars else
                       Line2D([], [], color=colour, linestyle=arm_dash(index), linewidth=1.4,
                              label=label))
    return handles


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _slo_handle(results: RunResults) -> list[Line2D | Patch]:
    if all(results.slo_target(lat.column) is None for lat in LATENCIES):
        return []
    return [Line2D([], [], label="SLO target", **_SLO_STYLE)]


def draw_cdfs(results: RunResults) -> Drawing:
    if results.requests is None:
        raise NoPlot(f"{REQUESTS_FILE} is missing from the results folder")
    present = [lat for lat in LATENCIES if lat.column in results.requests.columns]
    if not present:
        raise NoPlot(f"{REQUESTS_FILE} has none of the columns "
                     + ", ".join(lat.column for lat in LATENCIES))
    figure = Figure(figsize=(WIDTH_IN, 3.7))
    axes = figure.subplots(1, len(present), squeeze=False)[0]
    for axis, latency in zip(axes, present, strict=True):
        _cdf_panel(axis, results, latency)
    axes[0].set_ylabel("fraction of measured requests")
    figure_legend(figure, [*_arm_handles(results, bars=False), *_slo_handle(results)])
    return Drawing(figure, _missing_columns(present))


def _missing_columns(present: list[Latency]) -> list[str]:
    return [f"{lat.short}: no column {lat.column} in {REQUESTS_FILE}"
            for lat in LATENCIES if lat not in present]


def _percentile_values(results: RunResults, latency: Latency) -> list[list[float | None]]:
    """values[arm][percentile] in the latency's unit; None where summary.json has none."""
    table = []
    for arm in results.arms:
        dist = arm.metrics.get(latency.column)
        dist = dist if isinstance(dist, dict) else {}
        table.append([_scaled(dist.get(key), latency.scale) for key, _ in PERCENTILES])
    return table


def _scaled(value: object, scale: float) -> float | None:
    return float(value) * scale if isinstance(value, int | float) else None


def _bars_panel(axis: Axes, results: RunResults, latency: Latency) -> list[Text]:
    """Draw one latency's bars; returns their number labels, for `fit_bar_labels`."""
    values = _percentile_values(results, latency)
    width = 0.8 / len(values)
    label_bars = len(values) <= 4  # more arms than that and the numbers would be unreadable
    labels: list[Text] = []
    for index, row in enumerate(values):
        x = np.arange(len(PERCENTILES)) + (index - (len(values) - 1) / 2) * width
        heights = [np.nan if v is None else v for v in row]
        bars = axis.bar(x, heights, width=width * 0.95, color=arm_colour(index))
        if label_bars:
            labels += axis.bar_label(bars, labels=[_short(v) for v in row], fontsize=6.5,
                                     padding=1)
        _mark_empty(axis, x, row)
    present = [v for row in values for v in row if v is not None]
    axis.set_xlabel(_slo_marker(axis, results, latency, present, horizontal=False))
    if not present:
        axis.text(0.5, 0.5, "no finished requests", ha="center", va="center",
                  transform=axis.transAxes)
    log = _axis_scale(axis, present, horizontal=False)
    axis.set_xticks(np.arange(len(PERCENTILES)), [name for _, name in PERCENTILES])
    axis.set(title=latency.long, ylabel=f"{latency.short} ({latency.unit}{log})")
    axis.margins(y=0.12)  # room for the numbers above the tallest bars
    return labels


def _mark_empty(axis: Axes, x: np.ndarray, row: list[float | None]) -> None:
    """Say "none" where an arm has no value, so a missing bar does not read as zero."""
    base = blended_transform_factory(axis.transData, axis.transAxes)
    for position, value in zip(x, row, strict=True):
        if value is None:
            axis.text(position, 0.02, "none", transform=base, rotation=90, ha="center",
                      va="bottom", fontsize=6.5, color="0.4")


def _short(value: float | None) -> str:
    return "" if value is None else f"{value:,.3g}"


def draw_percentiles(results: RunResults) -> Drawing:
    figure = Figure(figsize=(WIDTH_IN, 3.7))
    axes = figure.subplots(1, len(LATENCIES))
    labels = [(axis, _bars_panel(axis, results, latency))
              for axis, latency in zip(axes, LATENCIES, strict=True)]
    figure_legend(figure, [*_arm_handles(results, bars=True), *_slo_handle(results)])
    fit_bar_labels(figure, labels)
    return Drawing(figure)


LATENCY_CDFS = PlotSpec(
    "latency_cdfs", "Latency distributions (CDF)",
    "Each curve is one arm's measured requests, sorted: read across at 0.5 for the median and "
    "at the dotted 0.99 line for the p99. A curve far to the right is slow; a long flat tail is "
    "a few very slow requests. A curve that levels off below 1 is the share of requests "
    "rejected. The dashed line is the SLO target.",
    draw_cdfs,
)
LATENCY_PERCENTILES = PlotSpec(
    "latency_percentiles", "Latency percentiles",
    "p50, p90, p99 and p99.9 of each latency from summary.json, one bar per arm, with the SLO "
    "target dashed. The gap between p50 and p99 is the tail: queueing and head-of-line "
    "blocking show up there first.",
    draw_percentiles,
)
