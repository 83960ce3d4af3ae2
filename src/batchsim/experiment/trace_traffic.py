"""A `trace` arrivals section -> the trace to replay: load, window, filter, sample, rescale.

The steps run in that order (docs/design.md §5), so a `target_rate` is the rate of what is finally
replayed. What each step kept is written into the traffic description (summary.json's
`traffic`), and what a parser dropped (BurstGPT's failed rows) comes back as notes for the
console -- nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import batchsim.workloads as wl
from batchsim.experiment.schema import TraceArrivals, TraceLengthFilter
from batchsim.workloads.traces import transforms
from batchsim.workloads.traces.raw import ColumnMap, TraceOptions

# The format of each shipped trace, so that a mismatch is named instead of failing to parse.
SHIPPED_TRACE_FORMATS = {
    "azure2023-conv": "azure2023",
    "azure2023-code": "azure2023",
    "mooncake-conversation": "mooncake",
}


@dataclass(frozen=True, slots=True)
class ReplayedTrace:
    trace: wl.TraceRequests  # transformed; arrival_s is what is replayed
    description: str  # e.g. "trace X (window [0, 600) s: 812 of 918; target_rate 2/s ...)"


def replay_trace(arrivals: TraceArrivals, base_dir: Path,
                 rng: np.random.Generator) -> ReplayedTrace:
    """Load the trace and apply the section's transforms; ``rng`` drives `sample_fraction`."""
    _check_shipped_format(arrivals)
    path = wl.resolve_trace_path(arrivals.path, base_dir)
    trace = wl.load_trace(path, arrivals.format, _options(arrivals))
    steps: list[str] = []
    if arrivals.window_s is not None:
        start, end = arrivals.window_s
        before = len(trace)
        trace = transforms.window(trace, start, end)
        steps.append(f"window [{start:g}, {end:g}) s: {len(trace)} of {before}")
    if arrivals.filter is not None:
        before = len(trace)
        trace = _filtered(trace, arrivals.filter)
        steps.append(f"length filter: {len(trace)} of {before}")
    if arrivals.sample_fraction < 1:
        before = len(trace)
        trace = transforms.sample_fraction(trace, arrivals.sample_fraction, rng)
        steps.append(f"sample_fraction {arrivals.sample_fraction:g}: {len(trace)} of {before}")
    if arrivals.target_rate is not None:
        trace, factor = transforms.scale_to_rate(trace, arrivals.target_rate)
        steps.append(f"target_rate {arrivals.target_rate:g}/s: time_scale {factor:.4g}")
    else:
        scaled = wl.apply_time_scale(trace.arrival_s, arrivals.time_scale)
        trace = transforms.select(trace, np.arange(len(trace)), scaled)
        steps.append(f"time_scale {arrivals.time_scale:g}")
    # The file's name, not its path: where the package or the user's file sits on this machine
    # is no part of the results (same input, same bytes anywhere).
    return ReplayedTrace(trace, f"trace {path.name} ({'; '.join(steps)})")


def _check_shipped_format(arrivals: TraceArrivals) -> None:
    shipped = SHIPPED_TRACE_FORMATS.get(arrivals.path)
    if shipped is not None and shipped != arrivals.format:
        raise wl.WorkloadError(f"shipped trace {arrivals.path!r} is format {shipped!r} "
                               f"(got format {arrivals.format!r})")
    if arrivals.path in wl.SHIPPED_TRACES and shipped is None:
        raise wl.WorkloadError(f"{arrivals.path!r} is not a trace with arrival times "
                               f"({wl.SHIPPED_TRACES[arrivals.path]})")


def _options(arrivals: TraceArrivals) -> TraceOptions:
    columns = arrivals.columns
    column_map = None if columns is None else ColumnMap(
        arrival_time=columns.arrival_time, prompt_tokens=columns.prompt_tokens,
        output_tokens=columns.output_tokens, arrival_time_unit=columns.arrival_time_unit)
    return TraceOptions(failed_rows=arrivals.failed_rows, columns=column_map)


def _filtered(trace: wl.TraceRequests, bounds: TraceLengthFilter) -> wl.TraceRequests:
    return transforms.filter_lengths(
        trace, min_prompt=bounds.min_prompt_tokens, max_prompt=bounds.max_prompt_tokens,
        min_output=bounds.min_output_tokens, max_output=bounds.max_output_tokens)
