"""Trace replay: real request streams (arrival times and token counts) from files.

``resolve_trace_path`` turns an experiment's ``trace.path`` into a file (a shipped trace name
or a path relative to the experiment file); ``load_trace`` parses it into ``TraceRequests``;
``apply_time_scale`` replays it faster or slower while keeping its burstiness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.prefix_blocks import PrefixBlocks
from batchsim.workloads.traces.raw import TraceOptions
from batchsim.workloads.traces.registry import TRACE_PARSERS, RawTrace


@dataclass(frozen=True, slots=True, eq=False)
class TraceRequests:
    """A trace ready to replay; row i of each array is request i.

    ``eq=False`` because comparing dataclasses would compare arrays element-wise.
    """

    arrival_s: np.ndarray  # float64 seconds from the first request (first = 0.0), sorted
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    source: str  # where it came from, for reports: the path or shipped name
    prefix_blocks: PrefixBlocks | None = None  # prompt block ids per request (Mooncake)
    notes: tuple[str, ...] = ()  # rows dropped and the like, for the summary and console

    def __len__(self) -> int:
        return int(self.arrival_s.size)


SHIPPED_TRACES: dict[str, str] = {
    "azure2023-conv": (
        "Azure LLM inference trace 2023, conversation service: "
        "19,366 requests over ~3,502 s (CC-BY-4.0)"
    ),
    "azure2023-code": (
        "Azure LLM inference trace 2023, code-completion service: "
        "8,819 requests over ~3,436 s, very bursty (CC-BY-4.0)"
    ),
    "mooncake-conversation": (
        "Mooncake (Kimi) conversation trace, its first 300 s: 918 requests with prefix "
        "block ids, format mooncake (Apache-2.0)"
    ),
    "sharegpt-lengths": (
        "ShareGPT prompt/output lengths (Llama-2 tokenizer), first 5,000 rows, no timestamps: "
        "for lengths: {kind: corpus} (Apache-2.0)"
    ),
    "servegen-rate": (
        "Alibaba ServeGen total request rate per 600 s window, first 2 days: for "
        "rate_curve arrivals (Apache-2.0)"
    ),
}

# Package-relative file of each shipped trace; kept next to SHIPPED_TRACES so the two agree.
_SHIPPED_FILES: dict[str, str] = {
    "azure2023-conv": "traces/azure2023/AzureLLMInferenceTrace_conv.csv",
    "azure2023-code": "traces/azure2023/AzureLLMInferenceTrace_code.csv",
    "mooncake-conversation": "traces/mooncake/conversation_trace_first_300s.jsonl",
    "sharegpt-lengths": "traces/lengths/sharegpt_lengths_first_5000.csv",
    "servegen-rate": "traces/servegen/servegen_total_rate_per_600s_first_2days.csv",
}


def resolve_trace_path(spec: str, base_dir: Path) -> Path:
    """A shipped trace name, or a file path (a relative one is taken from ``base_dir``).

    ``base_dir`` is the experiment file's folder, so an experiment finds its trace no matter
    where it is run from.
    """
    if spec in _SHIPPED_FILES:
        # importlib.resources finds the data in a regular (non-editable) install too. pip
        # installs packages unpacked, so the resource is a real file we can hand to pandas.
        return Path(str(files("batchsim.data").joinpath(_SHIPPED_FILES[spec])))
    given = Path(spec).expanduser()
    resolved = given if given.is_absolute() else base_dir / given
    if resolved.exists() and not resolved.is_file() and not resolved.is_dir():
        # A FIFO or a device would block the read (or never end): refuse it unread.
        raise WorkloadError(f"trace file {spec!r}: {resolved} is not a regular file (a pipe, "
                            "socket or device); expected a trace file")
    if not resolved.is_file():
        shipped = ", ".join(sorted(SHIPPED_TRACES))
        raise WorkloadError(
            f"trace file {spec!r} not found (looked for {resolved}; "
            f"expected an existing file or a shipped trace name: {shipped})"
        )
    return resolved


def load_trace(path: Path, format: str = "azure2023",
               options: TraceOptions | None = None) -> TraceRequests:
    """Parse a trace file; rows are put in time order and times rebased to start at 0.

    ``options`` carries what some formats need (a column map, what to do with failed rows).

    Out-of-order rows are sorted (stably, so ties keep file order) rather than rejected:
    merged logs are often slightly out of order and the order carries no other meaning.
    """
    parser = TRACE_PARSERS.get(format)
    if parser is None:
        known = ", ".join(sorted(TRACE_PARSERS))
        raise WorkloadError(f"{path}: unknown trace format {format!r} (known formats: {known})")
    return _to_requests(parser(path, options or TraceOptions()), source=str(path))


def _to_requests(raw: RawTrace, source: str) -> TraceRequests:
    order = np.argsort(raw.arrival_ns, kind="stable")
    arrival_ns = raw.arrival_ns[order]
    # Subtract in integer nanoseconds before converting: epoch-sized float64 values would
    # lose the sub-microsecond part.
    arrival_s = (arrival_ns - arrival_ns[0]).astype(np.float64) / 1e9
    return TraceRequests(
        arrival_s=arrival_s,
        prompt_tokens=raw.prompt_tokens[order],
        output_tokens=raw.output_tokens[order],
        source=source,
        prefix_blocks=None if raw.prefix_blocks is None else raw.prefix_blocks.take(order),
        notes=raw.notes,
    )


def apply_time_scale(arrival_s: np.ndarray, time_scale: float) -> np.ndarray:
    """Multiply every timestamp by ``time_scale``: 0.5 replays at twice the mean rate.

    Scaling every time by the same factor keeps the shape of the traffic (bursts, lulls,
    inter-arrival CV) while moving the mean rate, which is how a trace is driven at a target
    load.
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    return np.asarray(arrival_s, dtype=np.float64) * time_scale
