"""Per-format trace parsers: file -> raw columns, plus the registry ``load_trace`` consults.

A parser only decodes its format and validates rows (naming the line of any bad one); the
format-independent work (sorting, rebasing time to 0) lives in ``traces.py``. Adding a
format means one parser (the newer ones live in ``workloads/formats/``) and one registry
entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from workloads._csv_text import first_line_where, positive_int_column, read_csv_text
from workloads.errors import WorkloadError
from workloads.formats.azure2024 import parse_azure2024
from workloads.formats.burstgpt import parse_burstgpt
from workloads.formats.column_map import parse_csv, parse_parquet
from workloads.formats.mooncake import parse_mooncake
from workloads.raw_trace import RawTrace, TraceOptions

# A parser takes the file and the format options (a format ignores those not its own).
TraceParser = Callable[[Path, TraceOptions], RawTrace]

AZURE2023_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# Azure writes 7 fractional digits (100 ns ticks); %f in pandas accepts up to 9.
_AZURE_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_AZURE_TIME_EXAMPLE = "2023-11-16 18:17:03.9799600"


def parse_azure2023(path: Path) -> RawTrace:
    """Azure LLM inference trace 2023: ``TIMESTAMP,ContextTokens,GeneratedTokens``."""
    frame = read_csv_text(path)
    header = tuple(frame.columns)
    if header != AZURE2023_HEADER:
        raise WorkloadError(
            f"{path}:1: header is {','.join(header)!r} "
            f"(expected {','.join(AZURE2023_HEADER)!r} for format 'azure2023')"
        )
    if frame.empty:
        raise WorkloadError(f"{path}:2: no requests after the header (expected at least one row)")
    arrival_ns = _parse_timestamps(frame["TIMESTAMP"], path)
    return RawTrace(
        arrival_ns=arrival_ns,
        prompt_tokens=positive_int_column(frame, "ContextTokens", path),
        output_tokens=positive_int_column(frame, "GeneratedTokens", path),
    )


def _parse_timestamps(text: pd.Series, path: Path) -> np.ndarray:
    # Vectorised strptime with a fixed format is ~100x faster than per-row inference, and a
    # fixed format rejects time zones and other look-alikes instead of guessing.
    stripped = text.str.strip()
    parsed = _to_ns(stripped, _AZURE_TIME_FORMATS[0])
    failed = np.isnat(parsed)
    if failed.any():  # rows written without a fractional part
        parsed[failed] = _to_ns(stripped[failed], _AZURE_TIME_FORMATS[1])
        failed = np.isnat(parsed)
    if failed.any():
        line = first_line_where(text.index, failed)
        value = str(text.loc[line]).strip()
        what = "missing TIMESTAMP" if not value else f"unparseable TIMESTAMP {value!r}"
        raise WorkloadError(f"{path}:{line}: {what} (expected e.g. {_AZURE_TIME_EXAMPLE!r})")
    return parsed.view(np.int64)


def _to_ns(text: pd.Series, time_format: str) -> np.ndarray:
    parsed = pd.to_datetime(text, format=time_format, errors="coerce")
    # copy=True: under copy-on-write pandas may hand back a read-only view, and the caller
    # fills in rows from the fallback format.
    return parsed.to_numpy(dtype="datetime64[ns]", copy=True)


def _azure2023(path: Path, options: TraceOptions) -> RawTrace:
    del options  # nothing to choose for this format
    return parse_azure2023(path)


TRACE_PARSERS: dict[str, TraceParser] = {
    "azure2023": _azure2023,
    "azure2024": parse_azure2024,
    "mooncake": parse_mooncake,
    "burstgpt": parse_burstgpt,
    "csv": parse_csv,
    "parquet": parse_parquet,
}
