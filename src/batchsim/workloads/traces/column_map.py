"""Generic traces: any CSV or Parquet file, with a column map naming the three columns.

``ColumnMap`` says which column holds the arrival time (and its unit: numbers in s, ms, us or
ns, or date-times), the prompt tokens and the output tokens; other columns are ignored. CSV
errors name the file line; Parquet has no lines, so its errors name the row (1-based).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.traces.checks import (
    datetime_column_ns,
    nonnegative_number_column,
    numbers_to_ns,
)
from batchsim.workloads.traces.csv_text import positive_int_column, read_csv_text, require_columns
from batchsim.workloads.traces.raw import ColumnMap, RawTrace, TraceOptions

_DATETIME_EXAMPLE = "2024-05-10 00:00:00.009930+00:00"


def _column_map(path: Path, options: TraceOptions, format_name: str) -> ColumnMap:
    if options.columns is None:
        raise WorkloadError(f"{path}: format {format_name!r} needs a column map (columns: "
                            "{arrival_time: ..., prompt_tokens: ..., output_tokens: ...})")
    return options.columns


def parse_csv(path: Path, options: TraceOptions) -> RawTrace:
    """A CSV with a header row; the mapped columns are validated row by row."""
    columns = _column_map(path, options, "csv")
    frame = read_csv_text(path)
    require_columns(frame, path, (columns.arrival_time, columns.prompt_tokens,
                                  columns.output_tokens))
    if frame.empty:
        raise WorkloadError(f"{path}:2: no requests after the header (expected at least one row)")
    if columns.arrival_time_unit == "datetime":
        arrival_ns = datetime_column_ns(frame, columns.arrival_time, path, ("ISO8601",),
                                        _DATETIME_EXAMPLE)
    else:
        seconds = nonnegative_number_column(frame, columns.arrival_time, path)
        arrival_ns = numbers_to_ns(seconds, columns.arrival_time_unit)
    return RawTrace(arrival_ns=arrival_ns,
                    prompt_tokens=positive_int_column(frame, columns.prompt_tokens, path),
                    output_tokens=positive_int_column(frame, columns.output_tokens, path))


def parse_parquet(path: Path, options: TraceOptions) -> RawTrace:
    """A Parquet file; numeric or timestamp time column, integer token columns."""
    columns = _column_map(path, options, "parquet")
    wanted = [columns.arrival_time, columns.prompt_tokens, columns.output_tokens]
    frame = _read_parquet(path, wanted)
    if frame.empty:
        raise WorkloadError(f"{path}: no rows (expected at least one request)")
    return RawTrace(
        arrival_ns=_parquet_times_ns(frame[columns.arrival_time], columns, path),
        prompt_tokens=_parquet_counts(frame[columns.prompt_tokens], path),
        output_tokens=_parquet_counts(frame[columns.output_tokens], path),
    )


def _read_parquet(path: Path, wanted: list[str]) -> pd.DataFrame:
    import pyarrow.parquet as pq  # only Parquet traces need it

    try:
        names = pq.read_schema(path).names
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:  # pyarrow raises ArrowInvalid (a ValueError)
        raise WorkloadError(f"{path}: not a readable Parquet file ({err})") from None
    missing = [name for name in wanted if name not in names]
    if missing:
        raise WorkloadError(f"{path}: missing column {', '.join(map(repr, missing))} "
                            f"(available columns: {', '.join(names) or 'none'})")
    return pd.read_parquet(path, columns=list(dict.fromkeys(wanted)))


def _first_bad(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0]) + 1  # 1-based row, as a spreadsheet counts


def _parquet_counts(series: pd.Series, path: Path) -> np.ndarray:
    name = str(series.name)
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        raise WorkloadError(f"{path}: column {name!r} has type {series.dtype} "
                            "(expected integer token counts)")
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < 1) | (np.mod(values, 1) != 0)
    if bad.any():
        row = _first_bad(bad)
        raise WorkloadError(f"{path}: row {row}: {name} is {values[row - 1]:g} "
                            "(expected an integer >= 1)")
    return values.astype(np.int64)


def _parquet_times_ns(series: pd.Series, columns: ColumnMap, path: Path) -> np.ndarray:
    name = str(series.name)
    if columns.arrival_time_unit == "datetime":
        if not pd.api.types.is_datetime64_any_dtype(series):
            raise WorkloadError(f"{path}: column {name!r} has type {series.dtype} "
                                "(expected a timestamp column for arrival_time_unit datetime)")
        if isinstance(series.dtype, pd.DatetimeTZDtype):
            series = series.dt.tz_convert("UTC").dt.tz_localize(None)
        stamps = series.to_numpy(dtype="datetime64[ns]")
        bad = np.isnat(stamps)
        if bad.any():
            raise WorkloadError(f"{path}: row {_first_bad(bad)}: missing {name}")
        return stamps.view(np.int64)
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        raise WorkloadError(f"{path}: column {name!r} has type {series.dtype} (expected numbers "
                            f"in {columns.arrival_time_unit}, or arrival_time_unit: datetime)")
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        row = _first_bad(bad)
        raise WorkloadError(f"{path}: row {row}: {name} is {values[row - 1]:g} "
                            "(expected a time, a number >= 0)")
    return numbers_to_ns(values, columns.arrival_time_unit)
