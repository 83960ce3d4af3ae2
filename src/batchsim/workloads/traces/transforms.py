"""Trace transforms: cut, thin, rescale and splice real request streams.

Each takes a ``TraceRequests`` and returns a new one (inputs are never modified), keeping every
per-request column -- prefix block ids included -- aligned with the arrivals. The usual order
is window -> length filter -> sample -> time scale, so that a target rate is hit by what is
finally replayed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.prefix_blocks import PrefixBlocks
from batchsim.workloads.traces.replay import TraceRequests


def select(trace: TraceRequests, rows: np.ndarray,
           arrival_s: np.ndarray | None = None) -> TraceRequests:
    """The requests at ``rows`` (a boolean mask or indices), optionally with new times."""
    index = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows)
    times = trace.arrival_s[index] if arrival_s is None else arrival_s
    blocks = None if trace.prefix_blocks is None else trace.prefix_blocks.take(index)
    return TraceRequests(times, trace.prompt_tokens[index], trace.output_tokens[index],
                         trace.source, blocks, trace.notes)


def window(trace: TraceRequests, start_s: float, end_s: float) -> TraceRequests:
    """Requests arriving in [start_s, end_s), with times shifted so that start_s becomes 0.

    Shifting by the window start (not by the first request in it) keeps the lull before the
    first arrival, which is part of the traffic's shape.
    """
    if not (0 <= start_s < end_s):
        raise ValueError(f"window needs 0 <= start < end, got [{start_s}, {end_s})")
    keep = (trace.arrival_s >= start_s) & (trace.arrival_s < end_s)
    if not keep.any():
        raise WorkloadError(f"{trace.source}: no requests in window [{start_s:g}, {end_s:g}) s "
                            f"(the trace spans 0 to {trace.arrival_s[-1]:g} s)")
    return select(trace, keep, trace.arrival_s[keep] - start_s)


def filter_lengths(trace: TraceRequests, *, min_prompt: int | None = None,
                   max_prompt: int | None = None, min_output: int | None = None,
                   max_output: int | None = None) -> TraceRequests:
    """Requests whose prompt and output token counts lie within the given bounds (inclusive)."""
    keep = np.ones(len(trace), dtype=bool)
    for values, low, high in ((trace.prompt_tokens, min_prompt, max_prompt),
                              (trace.output_tokens, min_output, max_output)):
        if low is not None:
            keep &= values >= low
        if high is not None:
            keep &= values <= high
    if not keep.any():
        raise WorkloadError(f"{trace.source}: the length filter leaves no requests")
    return select(trace, keep)


def sample_fraction(trace: TraceRequests, fraction: float,
                    rng: np.random.Generator) -> TraceRequests:
    """Keep each request independently with probability ``fraction`` (seeded thinning).

    Independent thinning of a point process scales its rate by ``fraction`` and keeps its
    time profile (a diurnal trace stays diurnal), unlike taking the first N requests.
    """
    if not (0 < fraction <= 1):
        raise ValueError(f"sample fraction must be in (0, 1], got {fraction}")
    keep = rng.random(len(trace)) < fraction
    if not keep.any():
        raise WorkloadError(f"{trace.source}: sampling a fraction of {fraction:g} kept no "
                            f"requests of {len(trace)}")
    return select(trace, keep)


def mean_rate(arrival_s: np.ndarray) -> float:
    """Requests per second as 1 / mean inter-arrival gap: (n - 1) / (last - first)."""
    span = float(arrival_s[-1] - arrival_s[0]) if arrival_s.size else 0.0
    if arrival_s.size < 2 or span <= 0:
        raise WorkloadError("a mean rate needs at least two requests at different times "
                            f"(got {arrival_s.size} spanning {span:g} s)")
    return (arrival_s.size - 1) / span


def scale_to_rate(trace: TraceRequests, target_rate: float) -> tuple[TraceRequests, float]:
    """Multiply every time by one factor so the mean rate becomes ``target_rate``.

    One common factor keeps the traffic's shape -- bursts, lulls, the coefficient of variation
    of the gaps -- while moving its mean rate. Returns the scaled trace and the factor.
    """
    if not (math.isfinite(target_rate) and target_rate > 0):
        raise ValueError(f"target rate must be > 0, got {target_rate}")
    try:
        factor = mean_rate(trace.arrival_s) / target_rate
    except WorkloadError as err:
        raise WorkloadError(f"{trace.source}: cannot scale to a target rate: {err}") from None
    return select(trace, np.arange(len(trace)), trace.arrival_s * factor), factor


def splice_tenants(traces: Sequence[TraceRequests]) -> tuple[TraceRequests, np.ndarray]:
    """Merge several traces into one stream by arrival time; returns it and each request's
    tenant (index into ``traces``). Ties keep tenant order.

    Prefix block ids are renumbered per tenant so two tenants never appear to share a prefix
    they never shared; they are kept only when every trace has them.
    """
    if not traces:
        raise ValueError("splicing needs at least one trace")
    tenant = np.concatenate([np.full(len(t), i, dtype=np.int64) for i, t in enumerate(traces)])
    order = np.argsort(np.concatenate([t.arrival_s for t in traces]), kind="stable")
    merged = TraceRequests(
        arrival_s=np.concatenate([t.arrival_s for t in traces])[order],
        prompt_tokens=np.concatenate([t.prompt_tokens for t in traces])[order],
        output_tokens=np.concatenate([t.output_tokens for t in traces])[order],
        source=" + ".join(t.source for t in traces),
        prefix_blocks=_spliced_blocks(traces, order),
        notes=tuple(note for t in traces for note in t.notes),
    )
    return merged, tenant[order]


def _spliced_blocks(traces: Sequence[TraceRequests], order: np.ndarray) -> PrefixBlocks | None:
    parts = [t.prefix_blocks for t in traces]
    if any(p is None for p in parts):
        return None
    ids, counts, next_id = [], [], 0
    for part in parts:
        assert part is not None
        ids.append(part.ids + next_id)
        counts.append(part.counts())
        next_id += int(part.ids.max()) + 1 if part.ids.size else 0
    offsets = np.zeros(sum(len(p) for p in parts if p is not None) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=offsets[1:])
    block_tokens = parts[0].block_tokens if parts[0] is not None else 0
    return PrefixBlocks(np.concatenate(ids), offsets, block_tokens).take(order)
