"""Column checks shared by the CSV-based parsers: every error names the file line and value.

``read_csv_text`` gives each row's file line as the frame index; these turn text columns into
numbers and raise ``WorkloadError`` at the first value that is not what the format expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from batchsim.workloads.errors import WorkloadError, shown
from batchsim.workloads.traces.csv_text import _describe_bad_count, first_line_where
from batchsim.workloads.traces.raw import NS_PER_UNIT

_COUNT = r"\s*[0-9]{1,18}\s*"


def nonnegative_int_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """Column as int64 counts >= 0 (0 allowed: the caller decides what a 0 means)."""
    text = frame[column].astype(str)
    ok = text.str.fullmatch(_COUNT).to_numpy(dtype=bool)
    if not ok.all():
        line = first_line_where(frame.index, ~ok)
        problem = _describe_bad_count(column, text.loc[line]).replace(">= 1", ">= 0")
        raise WorkloadError(f"{path}:{line}: {problem}")
    return text.str.strip().astype(np.int64).to_numpy()


def nonnegative_number_column(frame: pd.DataFrame, column: str, path: Path,
                              expected: str = "a time, a number >= 0") -> np.ndarray:
    """Column as float64 numbers >= 0 (times in some unit, rates)."""
    text = frame[column].astype(str).str.strip()
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        line = first_line_where(frame.index, bad)
        value = str(text.loc[line])
        what = f"missing {column}" if not value else f"{column} {shown(value)} is not a number >= 0"
        raise WorkloadError(f"{path}:{line}: {what} (expected {expected})")
    return values


def numbers_to_ns(values: np.ndarray, unit: str) -> np.ndarray:
    """Times in ``unit`` (s, ms, us, ns) as int64 nanoseconds, rounded to the nearest one."""
    return np.rint(np.asarray(values, dtype=np.float64) * NS_PER_UNIT[unit]).astype(np.int64)


def datetime_column_ns(frame: pd.DataFrame, column: str, path: Path,
                       formats: Sequence[str], example: str) -> np.ndarray:
    """Date-time strings as int64 UTC nanoseconds, trying each strptime format in turn.

    Fixed formats (rather than per-row inference) are fast and reject look-alikes instead of
    guessing; a row may match any of them, so files that mix e.g. timestamps with and
    without fractional seconds load. Offsets (``+00:00``) are converted to UTC.
    """
    text = frame[column].astype(str).str.strip()
    parsed = np.full(text.size, np.datetime64("NaT"), dtype="datetime64[ns]")
    for time_format in formats:
        failed = np.isnat(parsed)
        if not failed.any():
            break
        parsed[failed] = _to_utc_ns(text[failed], time_format)
    failed = np.isnat(parsed)
    if failed.any():
        line = first_line_where(frame.index, failed)
        value = str(text.loc[line])
        what = f"missing {column}" if not value else f"unparseable {column} {shown(value)}"
        raise WorkloadError(f"{path}:{line}: {what} (expected e.g. {example!r})")
    return parsed.view(np.int64)


def _to_utc_ns(text: pd.Series, time_format: str) -> np.ndarray:
    utc = "%z" in time_format or time_format == "ISO8601"
    parsed = pd.to_datetime(text, format=time_format, errors="coerce", utc=utc)
    if utc:  # drop the time zone once everything is UTC: numpy has no tz-aware datetimes
        parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
    return parsed.to_numpy(dtype="datetime64[ns]")
