"""Azure LLM inference trace 2024 (one week, ``AzureLLMInferenceTrace_{code,conv}_1week.csv``).

Same columns as 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``), but the timestamps carry a
UTC offset and come in mixed forms: ``2024-05-10 00:00:00.009930+00:00``, and rows whose
time falls on a whole second written without a fractional part (``2024-05-10 00:00:01+00:00``).
"""

from __future__ import annotations

from pathlib import Path

from batchsim.workloads.errors import WorkloadError, shown
from batchsim.workloads.traces.checks import datetime_column_ns
from batchsim.workloads.traces.csv_text import positive_int_column, read_csv_text
from batchsim.workloads.traces.raw import RawTrace, TraceOptions

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# A row is tried against each in turn; an offset is required, as a time without one would be
# ambiguous next to rows that have one.
_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f%z", "%Y-%m-%d %H:%M:%S%z")
_TIME_EXAMPLE = "2024-05-10 00:00:00.009930+00:00"


def parse_azure2024(path: Path, options: TraceOptions) -> RawTrace:
    """``TIMESTAMP`` (with a UTC offset) -> arrival, ``ContextTokens`` / ``GeneratedTokens``."""
    del options  # nothing to choose for this format
    frame = read_csv_text(path)
    header = tuple(frame.columns)
    if header != HEADER:
        raise WorkloadError(
            f"{path}:1: header is {shown(','.join(header))} "
            f"(expected {','.join(HEADER)!r} for format 'azure2024')"
        )
    if frame.empty:
        raise WorkloadError(f"{path}:2: no requests after the header (expected at least one row)")
    return RawTrace(
        arrival_ns=datetime_column_ns(frame, "TIMESTAMP", path, _TIME_FORMATS, _TIME_EXAMPLE),
        prompt_tokens=positive_int_column(frame, "ContextTokens", path),
        output_tokens=positive_int_column(frame, "GeneratedTokens", path),
    )
