"""Timelines per arm from timeseries.parquet: batch size, queue length, KV use, preemptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from batchsim.apps.report.figures import Drawing, NoPlot, PlotSpec
from batchsim.apps.report.results import TIMESERIES_FILE, RunResults
from batchsim.apps.report.style import WIDTH_IN, arm_colour, arm_dash, figure_legend

TIME = "t_start_s"
_PANEL_IN = 1.9  # height of one panel
_WARMUP_COLOUR = "0.88"
_LAST_ARRIVAL: dict[str, Any] = {"color": "0.4", "linestyle": ":", "linewidth": 1.0}


@dataclass(frozen=True, slots=True)
class Panel:
    column: str
    ylabel: str
    scale: float = 1.0
    only_when_nonzero: bool = False  # a panel of zeros says nothing; the table says "0"


PANELS = (
    # An autoscaled arm's pool (docs/how-to/autoscaling.md); the columns exist only then
    # (`only_when_nonzero` also keeps their absence out of the notes).
    Panel("replicas_serving", "replicas serving\n(mean per bin)", only_when_nonzero=True),
    Panel("replicas_starting", "replicas starting\n(cold starts)", only_when_nonzero=True),
    Panel("batch_size", "batch size\n(sequences / replica)"),
    Panel("num_waiting", "queue length\n(waiting requests)"),
    Panel("kv_utilization_mean", "KV-cache use\n(% of blocks)", scale=100.0),
    Panel("preemptions", "preemptions\n(per bin)", only_when_nonzero=True),
)


def _frames(results: RunResults) -> list[tuple[int, str, pd.DataFrame]]:
    """(arm index, label, rows) of the arms that have timeline rows, in time order."""
    frames = []
    for index, arm in enumerate(results.arms):
        frame = results.arm_timeseries(arm.name)
        if frame is not None and len(frame):
            frames.append((index, arm.label, frame.sort_values(TIME, kind="stable")))
    return frames


def _shown(panel: Panel, frames: list[tuple[int, str, pd.DataFrame]]) -> bool:
    if not panel.only_when_nonzero:
        return True
    return any(frame[panel.column].fillna(0).ne(0).any() for _, _, frame in frames)


def _last_arrival(results: RunResults) -> float | None:
    """When traffic stops: what an arm still does after it is catching up on its queue."""
    requests = results.requests
    if requests is None or "arrival_s" not in requests.columns or not len(requests):
        return None
    return float(requests["arrival_s"].max())


def _bin_steps(starts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step per bin, the last one included: steps-post alone would end at its start."""
    if starts.size < 2:
        return starts, values
    width = float(np.min(np.diff(starts)))
    return np.append(starts, starts[-1] + width), np.append(values, values[-1])


def _draw_panel(axis: Axes, panel: Panel, frames: list[tuple[int, str, pd.DataFrame]],
                warmup_s: float, last_arrival: float | None) -> None:
    if warmup_s > 0:
        axis.axvspan(0.0, warmup_s, color=_WARMUP_COLOUR, linewidth=0)
    if last_arrival is not None:
        axis.axvline(last_arrival, **_LAST_ARRIVAL)
    for index, _, frame in frames:
        times, values = _bin_steps(frame[TIME].to_numpy(float),
                                   frame[panel.column].to_numpy(float) * panel.scale)
        axis.plot(times, values, drawstyle="steps-post", color=arm_colour(index),
                  linestyle=arm_dash(index), linewidth=1.2)
    axis.set_ylabel(panel.ylabel)
    axis.set_ylim(bottom=0)


def draw_timelines(results: RunResults) -> Drawing:
    if results.timeseries is None:
        raise NoPlot(f"{TIMESERIES_FILE} is missing from the results folder")
    columns = set(results.timeseries.columns)
    if TIME not in columns or "arm" not in columns:
        raise NoPlot(f"{TIMESERIES_FILE} has no {TIME} or arm column")
    frames = _frames(results)
    if not frames:
        raise NoPlot(f"{TIMESERIES_FILE} has no rows for these arms")
    available = [p for p in PANELS if p.column in columns]
    panels = [p for p in available if _shown(p, frames)]
    if not panels:
        raise NoPlot(f"{TIMESERIES_FILE} has none of the columns "
                     + ", ".join(p.column for p in PANELS))
    figure = Figure(figsize=(WIDTH_IN, 0.6 + _PANEL_IN * len(panels)))
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    warmup_s, last_arrival = results.setting("warmup_s"), _last_arrival(results)
    for axis, panel in zip(axes, panels, strict=True):
        _draw_panel(axis, panel, frames, warmup_s, last_arrival)
    axes[-1].set_xlabel("simulated time (s)")
    figure_legend(figure, _handles(frames, warmup_s, last_arrival), titled=False)
    return Drawing(figure, _notes(results, frames, available))


def _handles(frames: list[tuple[int, str, pd.DataFrame]], warmup_s: float,
             last_arrival: float | None) -> list[Line2D | Patch]:
    handles: list[Line2D | Patch] = [
        Line2D([], [], color=arm_colour(i), linestyle=arm_dash(i), linewidth=1.2, label=label)
        for i, label, _ in frames
    ]
    if warmup_s > 0:
        handles.append(Patch(color=_WARMUP_COLOUR, label="warm-up (not measured)"))
    if last_arrival is not None:
        handles.append(Line2D([], [], label="last arrival", **_LAST_ARRIVAL))
    return handles


def _notes(results: RunResults, frames: list[tuple[int, str, pd.DataFrame]],
           available: list[Panel]) -> list[str]:
    drawn = {label for _, label, _ in frames}
    notes = [f"{arm.label}: no rows in {TIMESERIES_FILE}" for arm in results.arms
             if arm.label not in drawn]
    notes += [f"no column {p.column} in {TIMESERIES_FILE}" for p in PANELS
              if p not in available and not p.only_when_nonzero]
    return notes


TIMELINES = PlotSpec(
    "timelines", "Timelines",
    "Per time bin, averaged over the bin: sequences in the running batch, requests waiting in "
    "the queue, and the share of KV-cache blocks in use (plus preemptions, when there are "
    "any). A queue that keeps growing means the arm cannot keep up with the offered load; KV "
    "use near 100% with preemptions means the cache, not the GPU's speed, is the limit. An "
    "experiment with an autoscaled arm adds the replicas serving and those still starting.",
    draw_timelines,
)
