"""Azure LLM inference trace 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``), as shipped.

A clean file (every timestamp and count well formed) is read by Arrow directly; anything else
goes through the text path, which names the line of the first bad row.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from batchsim.workloads.errors import WorkloadError, shown
from batchsim.workloads.traces.csv_text import first_line_where, positive_int_column, read_csv_text
from batchsim.workloads.traces.raw import RawTrace, TraceOptions

AZURE2023_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# Azure writes 7 fractional digits (100 ns ticks); %f in pandas accepts up to 9.
_AZURE_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_AZURE_TIME_EXAMPLE = "2023-11-16 18:17:03.9799600"

# What the quick reader accepts (`_read_clean_azure2023`): a subset of what the text path
# accepts, written so that both read the same numbers from it — counts of 1 to 18 ASCII
# digits (no space, no sign); a date and time of day in range, with 0 to 9 fractional digits.
_MAX_COUNT_DIGITS = 18
_CLEAN_TIMESTAMP = (r"^(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]) "
                    r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?$")


def parse_azure2023(path: Path) -> RawTrace:
    """Azure LLM inference trace 2023: ``TIMESTAMP,ContextTokens,GeneratedTokens``."""
    clean = _read_clean_azure2023(path)
    if clean is not None:
        return clean
    frame = read_csv_text(path)
    header = tuple(frame.columns)
    if header != AZURE2023_HEADER:
        raise WorkloadError(
            f"{path}:1: header is {shown(','.join(header))} "
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


def _read_clean_azure2023(path: Path) -> RawTrace | None:
    """The trace read by Arrow's CSV reader, or None where the file is not plainly
    well-formed; then the pandas text path reads it, naming the line of any bad row.

    Arrow reads the shipped conversation trace in about a fifth of the text path's time
    (whose per-value checks in Python are most of it). Every value must have the form above,
    which the text path accepts with the same numbers; a file with a quote is left to the text
    path, whose quoting rules are then the only ones that apply.
    """
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b'"' in data:
        return None
    as_text = pa_csv.ConvertOptions(column_types=dict.fromkeys(AZURE2023_HEADER, pa.string()),
                                    strings_can_be_null=False)
    try:
        table = pa_csv.read_csv(pa.BufferReader(data.removeprefix(codecs.BOM_UTF8)),
                                convert_options=as_text)
    except (pa.ArrowException, ValueError):
        return None
    if tuple(table.column_names) != AZURE2023_HEADER or table.num_rows == 0:
        return None
    stamps, prompt, output = (table.column(name) for name in AZURE2023_HEADER)
    if not (_all_timestamps(stamps) and _all_counts(prompt) and _all_counts(output)):
        return None
    try:
        arrival = pc.cast(stamps, pa.timestamp("ns")).to_numpy()
    except pa.ArrowInvalid:  # a day the month does not have
        return None
    prompt_tokens, output_tokens = (pc.cast(c, pa.int64()).to_numpy() for c in (prompt, output))
    if (prompt_tokens < 1).any() or (output_tokens < 1).any():
        return None
    return RawTrace(arrival_ns=arrival.view(np.int64), prompt_tokens=prompt_tokens,
                    output_tokens=output_tokens)


def _all_timestamps(column: pa.ChunkedArray) -> bool:
    return bool(pc.all(pc.match_substring_regex(column, _CLEAN_TIMESTAMP)).as_py())


def _all_counts(column: pa.ChunkedArray) -> bool:
    # ascii_is_decimal: not empty, every character 0-9 (a fifth of the time of a regex)
    digits = pc.and_(pc.ascii_is_decimal(column),
                     pc.less_equal(pc.binary_length(column), _MAX_COUNT_DIGITS))
    return bool(pc.all(digits).as_py())


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
        what = "missing TIMESTAMP" if not value else f"unparseable TIMESTAMP {shown(value)}"
        raise WorkloadError(f"{path}:{line}: {what} (expected e.g. {_AZURE_TIME_EXAMPLE!r})")
    return parsed.view(np.int64)


def _to_ns(text: pd.Series, time_format: str) -> np.ndarray:
    parsed = pd.to_datetime(text, format=time_format, errors="coerce")
    # copy=True: under copy-on-write pandas may hand back a read-only view, and the caller
    # fills in rows from the fallback format.
    return parsed.to_numpy(dtype="datetime64[ns]", copy=True)


def parse_azure2023_trace(path: Path, options: TraceOptions) -> RawTrace:
    del options  # nothing to choose for this format
    return parse_azure2023(path)
