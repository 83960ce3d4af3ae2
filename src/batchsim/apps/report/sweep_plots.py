"""Sweep curves from a sweep's summary.json: each metric's mean against the swept value.

One curve per arm, x = the first swept parameter (log when its values span more than 20×),
one panel row per combination of the other parameters' values. With replications every mean
has its 95% confidence interval drawn as a band (an error bar where a curve has one point).
The SLO targets are dashed on the p99 panels; each arm's knee (`SweepResults.knee`) is starred
on the throughput panel and marked by a dotted vertical line on every panel.

Arms that behave identically draw identical curves. So that none hides another, the curves are
nested: the first arm's line and markers are the widest, each later arm's narrower, on top.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullLocator

from batchsim.apps.report.figures import Drawing, NoPlot, PlotSpec
from batchsim.apps.report.results import SUMMARY_FILE
from batchsim.apps.report.style import (
    PLAIN,
    TWOS_AND_FIVES,
    WIDTH_IN,
    arm_colour,
    arm_dash,
    figure_legend,
)
from batchsim.apps.report.sweep_results import (
    KNEE_SHARE,
    MetricPath,
    PanelGroup,
    Series,
    SweepResults,
    parameter_label,
    short_name,
    value_text,
)

_LOG_SPREAD = 20.0  # an axis goes logarithmic when its values span more than this
_FEW_DECADES = 300.0  # up to this spread a log axis also labels 2s and 5s
_MAX_TICKS = 12  # up to this many swept values, each is a labelled tick
_MAX_ROWS = 8  # panel rows (groups of the other parameters) drawn in one figure
_ROW_IN = 2.6  # height of one panel row
_TITLE_LINE_IN = 0.18  # one more line of a wrapped panel title (axes.titlesize, spaced)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")
_NESTED = 4  # the first this many arms get nested line widths and marker sizes
_BAND_ALPHA = 0.14
_SLO_REACH = 3.0  # a target further than this from every value is written, not drawn
_SLO_STYLE: dict[str, Any] = {"color": "0.35", "linestyle": (0, (4, 3)), "linewidth": 1.0}
_KNEE_LINE: dict[str, Any] = {"color": "0.86", "linestyle": "-", "linewidth": 7.0}
_KNEE_STAR: dict[str, Any] = {"marker": "*", "markersize": 15, "markeredgecolor": "black",
                              "markeredgewidth": 0.7, "linestyle": "none", "zorder": 5}


@dataclass(frozen=True, slots=True)
class Curve:
    """One panel: a metric's mean (and interval) per point, one curve per arm."""

    path: MetricPath  # in a row's metrics and ci95
    title: str
    ylabel: str  # with the unit
    scale: float = 1.0  # summary value → ylabel's unit
    slo: str | None = None  # the latency whose p99 target is dashed on this panel
    unit: str = ""  # of an SLO target written out in words
    companion: MetricPath | None = None  # drawn thin and dotted in the arm's colour, no band
    companion_label: str = ""
    knee_stars: bool = False  # star each arm's knee on this panel
    log_y: bool = False  # may turn logarithmic (latencies); rates and shares stay linear


@dataclass(frozen=True, slots=True)
class CurveFigure:
    curves: tuple[Curve, ...]
    share_y: bool = False  # p50 and p99 on one scale, so the gap between them is the tail


@dataclass(slots=True)
class _Line:
    series: Series
    x: np.ndarray
    y: np.ndarray  # NaN where the arm has no value
    low: np.ndarray  # NaN where there is no interval
    high: np.ndarray
    companion: np.ndarray | None


def _positions(results: SweepResults) -> dict[Any, float]:
    """x of each swept value: the value itself, or its index when the values are labels."""
    values = results.x_values()
    if results.x_is_numeric():
        return {value: float(value) for value in values}
    return {value: float(index) for index, value in enumerate(values)}


def _scaled(value: float | None, scale: float) -> float:
    return math.nan if value is None else value * scale


def _line(results: SweepResults, series: Series, curve: Curve,
          positions: dict[Any, float]) -> _Line:
    rows = series.rows
    bounds = [row.interval(curve.path) for row in rows]
    companion = None
    if curve.companion is not None:
        path = curve.companion
        companion = np.array([_scaled(row.mean(path), curve.scale) for row in rows])
    return _Line(
        series,
        np.array([positions[results.x_of(row)] for row in rows]),
        np.array([_scaled(row.mean(curve.path), curve.scale) for row in rows]),
        np.array([math.nan if b is None else max(b[0], 0.0) * curve.scale for b in bounds]),
        np.array([math.nan if b is None else b[1] * curve.scale for b in bounds]),
        companion,
    )


def _nested(arm_index: int, arms: int) -> tuple[float, float]:
    """(line width, marker size): widest for the first arm, so identical curves all show."""
    nested = min(arms, _NESTED)
    rank = nested - 1 - min(arm_index, nested - 1)
    return 1.3 + 1.0 * rank, 4.0 + 2.2 * rank


def _marker(arm_index: int) -> str:
    return _MARKERS[arm_index % len(_MARKERS)]


def _draw_line(axis: Axes, line: _Line, arms: int) -> bool:
    """The arm's curve, its band (or error bars) and companion; True if an interval was drawn."""
    index = line.series.arm_index
    colour = arm_colour(index)
    width, size = _nested(index, arms)
    axis.plot(line.x, line.y, color=colour, linestyle=arm_dash(index), linewidth=width,
              marker=_marker(index), markersize=size, zorder=3)
    if line.companion is not None:
        axis.plot(line.x, line.companion, color=colour, linestyle=":", linewidth=1.2, zorder=2)
    has_interval = ~np.isnan(line.low)
    if not has_interval.any():
        return False
    if line.x.size == 1:  # a band needs two points
        axis.errorbar(line.x, line.y, yerr=[line.y - line.low, line.high - line.y],
                      color=colour, linestyle="none", capsize=4, zorder=2)
    else:
        axis.fill_between(line.x, line.low, line.high, color=colour, alpha=_BAND_ALPHA,
                          linewidth=0, zorder=1)
    return True


def _log_scale(axis: Axes, values: list[float], which: str) -> bool:
    """Turn the x or y axis logarithmic when its positive values span more than 20×."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if len(positive) < 2 or max(positive) / min(positive) <= _LOG_SPREAD:
        return False
    spread = max(positive) / min(positive)
    scaled = axis.yaxis if which == "y" else axis.xaxis
    (axis.set_yscale if which == "y" else axis.set_xscale)("log")
    scaled.set_major_formatter(PLAIN)
    if spread <= _FEW_DECADES:
        scaled.set_minor_formatter(TWOS_AND_FIVES)
    return True


def _x_axis(axis: Axes, results: SweepResults, positions: dict[Any, float],
            bottom_row: bool) -> None:
    values = list(positions)
    if results.x_is_numeric():
        log = _log_scale(axis, list(positions.values()), "x")
        if len(values) <= _MAX_TICKS:  # every swept value a tick, and only those
            axis.xaxis.set_major_locator(FixedLocator(list(positions.values())))
            axis.xaxis.set_major_formatter(PLAIN)
            axis.xaxis.set_minor_locator(NullLocator())
        label = parameter_label(results.x_parameter or "") + (", log scale" if log else "")
    else:
        axis.set_xticks(list(positions.values()), [value_text(v) for v in values])
        label = parameter_label(results.x_parameter or "")
    axis.margins(x=0.05)
    if bottom_row:
        axis.set_xlabel(label)


def _lines(results: SweepResults, group: dict[str, Any], curve: Curve,
           positions: dict[Any, float]) -> list[_Line]:
    """The panel's curves, arms without any value left out."""
    lines = [_line(results, series, curve, positions) for series in results.series(group)]
    return [line for line in lines if not np.isnan(line.y).all()]


def _slo(results: SweepResults, curve: Curve, lines: list[_Line]) -> tuple[float | None, str]:
    """(the SLO target to dash, in the panel's unit), or the sentence to write instead when
    it is far from every value: drawing it would squash the curves into a sliver."""
    target = results.slo_target(curve.slo) if curve.slo else None
    values = [float(v) for line in lines for v in line.y if not math.isnan(v)]
    if target is None or not values:
        return None, ""
    value = target * curve.scale
    if min(values) / _SLO_REACH <= value <= max(values) * _SLO_REACH:
        return value, ""
    above = value > max(values)
    return None, f"SLO target {value:,g} {curve.unit}: {'above' if above else 'below'} every value"


def _panel(axis: Axes, results: SweepResults, group: PanelGroup, curve: Curve,
           lines: list[_Line], positions: dict[Any, float]) -> set[str]:
    """Draw one panel; returns what the legend must explain: "band", "knee", "star", "slo"."""
    arms = len(results.arms)
    shown = set()
    for line in lines:
        if _draw_line(axis, line, arms):
            shown.add("band")
    knees = [(series, knee) for series in results.series(group.first)
             if (knee := results.knee(series)) is not None]
    for series, knee in knees:
        if curve.knee_stars:
            shown.add("star")
            axis.plot([positions[results.x_of(knee)]],
                      [_scaled(knee.mean(curve.path), curve.scale)],
                      color=arm_colour(series.arm_index), **_KNEE_STAR)
    for x in sorted({positions[results.x_of(knee)] for _, knee in knees}):
        axis.axvline(x, **_KNEE_LINE, zorder=0)
        shown.add("knee")
    target, _ = _slo(results, curve, lines)
    if target is not None:
        axis.axhline(target, **_SLO_STYLE, zorder=2)
        shown.add("slo")
    if not lines:
        axis.text(0.5, 0.5, "no values in summary.json", ha="center", va="center",
                  transform=axis.transAxes, color="0.4")
    label = group.label()
    axis.set_title(f"{label}: {curve.title}" if label else curve.title)
    axis.set_ylabel(curve.ylabel)
    return shown


def _far_notes(results: SweepResults, curve: Curve, group: PanelGroup,
               lines: list[_Line]) -> list[str]:
    """A target far from every value, in words under the figure: in the panel's title it
    would run past the panel."""
    _, far = _slo(results, curve, lines)
    label = group.label()
    return [f"{label + ': ' if label else ''}{curve.title}: {far} (not drawn)"] if far else []


def _fit_titles(figure: Figure, axes: np.ndarray) -> None:
    """Wrap each title wider than its panel, and grow the figure by the lines added, so that
    no title is cut off nor runs into its neighbour, and the panels keep their size."""
    renderer = FigureCanvasAgg(figure).get_renderer()
    extra_lines = 0
    for axis in axes.flat:
        title = axis.title
        room, width = axis.get_window_extent(renderer).width, title.get_window_extent(
            renderer).width
        if width <= room:
            continue
        text = title.get_text()
        lines = textwrap.wrap(text, width=max(8, int(len(text) * room / width)))
        title.set_text("\n".join(lines))
        extra_lines = max(extra_lines, len(lines) - 1)
    if not extra_lines:
        return
    extra_in = extra_lines * _TITLE_LINE_IN
    params = figure.subplotpars
    width_in, height_in = figure.get_size_inches()
    rows = axes.shape[0]
    axis_in = (params.top - params.bottom) * height_in / (rows + (rows - 1) * params.hspace)
    top_in, bottom_in = (1 - params.top) * height_in + extra_in, params.bottom * height_in
    height_in += rows * extra_in
    figure.set_size_inches(width_in, height_in)
    figure.subplots_adjust(top=1 - top_in / height_in, bottom=bottom_in / height_in,
                           hspace=params.hspace + extra_in / axis_in)


def _zero_throughout(results: SweepResults, curve: Curve) -> bool:
    """Every arm's value (and companion) is zero at every point: a flat line at zero says
    nothing a sentence does not."""
    paths = [curve.path, *([curve.companion] if curve.companion else [])]
    values = [row.mean(path) for row in results.rows for path in paths]
    return any(v is not None for v in values) and all(v in (None, 0.0) for v in values)


def _y_values(lines: list[_Line], curve: Curve, results: SweepResults) -> list[float]:
    values = [float(v) for line in lines for v in line.y if not math.isnan(v)]
    target, _ = _slo(results, curve, lines)
    return values + ([target] if target is not None else [])


def _y_scales(axes: list[Axes], lines: list[list[_Line]], curves: list[Curve],
              results: SweepResults, shared: bool) -> list[float]:
    """Log where the values span more than 20× (one decision for a shared row), else linear;
    returns each axis' bottom: zero, or on a log axis half the smallest value, where bands
    reaching further down are cut."""
    per_axis = [_y_values(ls, c, results) for ls, c in zip(lines, curves, strict=True)]
    pooled = [v for values in per_axis for v in values]
    bottoms = []
    for axis, curve, values, curve_lines in zip(axes, curves, per_axis, lines, strict=True):
        basis = pooled if shared else values
        if not (curve.log_y and _log_scale(axis, basis, "y")):
            bottoms.append(0.0)
            continue
        floor = min(v for v in basis if v > 0) / 2
        for line in curve_lines:
            line.low[line.low < floor] = floor
        bottoms.append(floor)
    return bottoms


def _missing_notes(results: SweepResults, curve: Curve, groups: list[dict[str, Any]]
                   ) -> list[str]:
    """Which arm has no value where, so a gap in a curve is never read as a zero."""
    notes = []
    for arm in results.arms:
        rows = [row for row in results.rows if row.arm == arm
                and any(all(row.point.get(k) == v for k, v in g.items()) for g in groups)]
        absent = [row for row in rows if row.mean(curve.path) is None]
        if not absent:
            continue
        key = results.x_parameter or ""
        where = "at any point" if len(absent) == len(rows) else "at " + ", ".join(
            f"{short_name(key)}={value_text(row.point.get(key))}" for row in absent)
        notes.append(f"{curve.title}: {arm} has no value {where} in {SUMMARY_FILE}")
    return notes


def _handles(results: SweepResults, figure_spec: CurveFigure, shown: set[str]
             ) -> list[Line2D | Patch]:
    arms = len(results.arms)
    handles: list[Line2D | Patch] = []
    for index, arm in enumerate(results.arms):
        width, size = _nested(index, arms)
        handles.append(Line2D([], [], color=arm_colour(index), linestyle=arm_dash(index),
                              linewidth=min(width, 2.0), marker=_marker(index),
                              markersize=min(size, 6.0), label=arm))
    if "band" in shown:
        handles.append(Patch(color="0.5", alpha=0.3, linewidth=0,
                             label=f"95% CI over {results.replications} replications"))
    for curve in figure_spec.curves:
        if curve.companion is not None:
            handles.append(Line2D([], [], color="0.3", linestyle=":", linewidth=1.2,
                                  label=curve.companion_label))
    if "slo" in shown:
        handles.append(Line2D([], [], label="SLO target (p99)", **_SLO_STYLE))
    if "knee" in shown:
        star: dict[str, Any] = {"marker": "*", "markersize": 10, "markerfacecolor": "0.6",
                                "markeredgecolor": "black"} if "star" in shown else {}
        handles.append(Line2D([], [], **_KNEE_LINE, **star,
                              label=f"knee: {KNEE_SHARE:.0%} of the arm's peak throughput"))
    return handles


def _row_major(handles: list[Line2D | Patch]) -> list[Line2D | Patch]:
    """The legend fills its four columns top-down; reorder so it reads left to right, the arms
    first."""
    columns = 4
    return [handles[i] for j in range(columns) for i in range(j, len(handles), columns)]


def draw_curves(figure_spec: CurveFigure, results: SweepResults) -> Drawing:
    if results.x_parameter is None:
        raise NoPlot("this sweep has no swept parameter (replications only): its one point "
                     "is in the table")
    every = list(figure_spec.curves)
    if not any(row.mean(c.path) is not None for row in results.rows for c in every):
        raise NoPlot(f"{SUMMARY_FILE} has no " + " or ".join(".".join(c.path) for c in every)
                     + " for any arm")
    zero = [c for c in every if _zero_throughout(results, c)]
    zero_note = " and ".join(c.title for c in zero) + ": zero at every point for every arm"
    curves = [c for c in every if c not in zero]
    if not curves:
        raise NoPlot(zero_note)
    groups = results.panel_groups()
    shown = groups[:_MAX_ROWS]
    positions = _positions(results)
    handle_rows = -(-(len(results.arms) + 4) // 4)
    figure = Figure(figsize=(WIDTH_IN, 1.2 + 0.2 * handle_rows + (_ROW_IN + 0.45) * len(shown)))
    axes = figure.subplots(len(shown), len(curves), squeeze=False)
    shown_features: set[str] = set()
    notes = [zero_note] if zero else []
    for row_axes, group in zip(axes, shown, strict=True):
        lines = [_lines(results, group.first, curve, positions) for curve in curves]
        bottoms = _y_scales(list(row_axes), lines, curves, results, figure_spec.share_y)
        for axis, curve, panel_lines in zip(row_axes, curves, lines, strict=True):
            shown_features |= _panel(axis, results, group, curve, panel_lines, positions)
            notes += _far_notes(results, curve, group, panel_lines)
        tops = [axis.get_ylim()[1] for axis in row_axes]
        for axis, bottom in zip(row_axes, bottoms, strict=True):
            axis.set_ylim(bottom, max(tops) if figure_spec.share_y else None)
    for row_index, row_axes in enumerate(axes):
        for axis in row_axes:
            _x_axis(axis, results, positions, bottom_row=row_index == len(shown) - 1)
    figure_legend(figure, _row_major(_handles(results, figure_spec, shown_features)))
    _fit_titles(figure, axes)
    drawn = [member for group in shown for member in group.members]
    notes += [note for curve in curves for note in _missing_notes(results, curve, drawn)]
    notes += [f"{group.label()}: identical results, drawn once" for group in shown
              if len(group.members) > 1]
    if len(groups) > len(shown):
        notes.append(f"{len(groups) - len(shown)} more combinations of "
                     + ", ".join(results.parameters[1:]) + " are in the table only")
    return Drawing(figure, notes)


def _spec(name: str, title: str, caption: str, figure_spec: CurveFigure
          ) -> PlotSpec[SweepResults]:
    return PlotSpec(name, title, caption, partial(draw_curves, figure_spec))


SWEEP_THROUGHPUT = _spec(
    "sweep_throughput", "Throughput and goodput vs load",
    "Mean over replications at each swept value, one curve per arm; the shaded band is the 95% "
    "confidence interval. Throughput climbs while the GPU has room and flattens at the knee "
    "(starred: the first point at 95% of the arm's peak). Goodput counts only requests that "
    "met every SLO target; the dotted line is all completed requests, so the gap between "
    "them is the requests that missed. Past the knee throughput holds or sags while goodput "
    "collapses: the tail, not the mean, is what breaks.",
    CurveFigure((
        Curve(("output_throughput_tps",), "output throughput", "output tokens / s",
              knee_stars=True),
        Curve(("goodput_rps",), "goodput", "requests / s",
              companion=("request_throughput_rps",),
              companion_label="dotted: request throughput (all completed)"),
    )),
)
SWEEP_TTFT = _spec(
    "sweep_ttft", "Time to first token vs load",
    "Median and p99 TTFT per point on one scale, the SLO target dashed on the p99 panel. "
    "TTFT is mostly queueing: flat while the arm keeps up, then climbing steeply past the "
    "knee as requests wait for room in the batch or the KV cache. Where the p99 crosses the "
    "target, goodput falls.",
    CurveFigure((
        Curve(("ttft_s", "p50"), "TTFT p50", "TTFT (s)", log_y=True),
        Curve(("ttft_s", "p99"), "TTFT p99", "TTFT (s)", slo="ttft_s", unit="s",
              log_y=True),
    ), share_y=True),
)
SWEEP_TPOT = _spec(
    "sweep_tpot", "Time per output token vs load",
    "Median and p99 TPOT per point on one scale, the SLO target dashed on the p99 panel. TPOT "
    "rises slowly with the batch size (each step does more work); a p99 pulling away from "
    "the median means some requests' decoding was stalled, by preemption and recomputation "
    "or by long prefills sharing their steps.",
    CurveFigure((
        Curve(("tpot_s", "p50"), "TPOT p50", "TPOT (ms)", scale=1000.0, log_y=True),
        Curve(("tpot_s", "p99"), "TPOT p99", "TPOT (ms)", scale=1000.0, slo="tpot_s",
              unit="ms", log_y=True),
    ), share_y=True),
)
SWEEP_PREEMPTIONS = _spec(
    "sweep_preemptions", "Preemptions and recomputation vs load",
    "Preemptions per 1,000 measured requests, and the share of all computed tokens that were "
    "computed again after a recompute preemption. Zero while the KV cache holds every "
    "running request; climbing past the knee, where the cache, not the GPU, is the limit. "
    "Swapping preempts without recomputing; reserving KV at admission avoids preempting.",
    CurveFigure((
        Curve(("preemptions_per_1000_requests",), "preemptions", "per 1,000 requests"),
        Curve(("recomputed_token_fraction",), "recomputed tokens",
              "% of computed tokens", scale=100.0),
    )),
)
SWEEP_KV = _spec(
    "sweep_kv", "KV-cache use and batch size vs load",
    "Time-averaged share of KV-cache blocks in use (dotted: the maximum), and the mean number "
    "of sequences per step. KV use climbs with the load until the cache is full; from there "
    "the batch stops growing, and extra users only wait or get preempted.",
    CurveFigure((
        Curve(("kv_utilization", "mean"), "KV-cache use", "% of blocks in use", scale=100.0,
              companion=("kv_utilization", "max"), companion_label="dotted: maximum KV use"),
        Curve(("mean_batch_size",), "batch size", "sequences per step (mean)"),
    )),
)

SWEEP_PLOTS: tuple[PlotSpec[SweepResults], ...] = (
    SWEEP_THROUGHPUT, SWEEP_TTFT, SWEEP_TPOT, SWEEP_PREEMPTIONS, SWEEP_KV)
