"""Read a CSV as text and turn columns into validated numbers, with file line numbers.

Parsing everything as strings first (instead of letting pandas infer dtypes) is what lets an
error name the offending line and show the value exactly as the user wrote it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from batchsim.workloads.errors import WorkloadError, shown

# Line 1 is the header, so data row i (0-based, blank lines kept) sits on file line i + 2.
# This assumes one physical line per record, i.e. no quoted fields with embedded newlines;
# none of the supported formats uses them.
FIRST_DATA_LINE = 2

# int64 holds 18 decimal digits safely; a longer token count is a typo, not a workload.
_COUNT_PATTERN = r"\s*[0-9]{1,18}\s*"
_PANDAS_LINE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def read_csv_text(path: Path) -> pd.DataFrame:
    """Every field as a string ("" when missing); blank lines dropped but line numbers kept.

    The frame's index is the 1-based file line of each row.
    """
    try:
        frame = pd.read_csv(
            path,
            dtype=str,
            na_filter=False,  # an empty field stays "" so it is reported, not turned into NaN
            skip_blank_lines=False,  # keeps row index == file line - 2
            encoding="utf-8-sig",  # tolerate the BOM spreadsheet exports add
        )
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory (expected a CSV file)") from None
    except pd.errors.EmptyDataError:
        raise WorkloadError(f"{path}:1: file is empty (expected a CSV header line)") from None
    except pd.errors.ParserError as err:
        raise WorkloadError(_describe_parser_error(path, err)) from None
    except (UnicodeDecodeError, OSError) as err:
        raise WorkloadError(f"{path}: cannot read file ({err})") from None
    if not isinstance(frame.index, pd.RangeIndex):
        # pandas' quirk: when the first data row has one field more than the header it takes
        # the first column as the index instead of failing as it does for later rows.
        width = len(frame.columns)
        raise WorkloadError(
            f"{path}:{FIRST_DATA_LINE}: row has {width + 1} fields "
            f"(expected {width}, as in the header)"
        )
    # Missing trailing fields come back as NaN even with na_filter=False.
    frame = frame.fillna("")
    frame.index = pd.RangeIndex(FIRST_DATA_LINE, FIRST_DATA_LINE + len(frame))
    frame.columns = [str(name).strip() for name in frame.columns]
    blank = (frame == "").all(axis=1)
    return frame[~blank]


def _describe_parser_error(path: Path, err: pd.errors.ParserError) -> str:
    match = _PANDAS_LINE.search(str(err))
    if match is None:
        return f"{path}: not a valid CSV file ({str(err).strip()})"
    expected, line, saw = match.groups()
    return f"{path}:{line}: row has {saw} fields (expected {expected}, as in the header)"


def require_columns(frame: pd.DataFrame, path: Path, columns: tuple[str, ...]) -> None:
    """Raise naming the missing column(s) and listing the ones the file does have."""
    missing = [name for name in columns if name not in frame.columns]
    if missing:
        available = ", ".join(map(str, frame.columns)) or "none"
        raise WorkloadError(
            f"{path}:1: missing column {', '.join(map(repr, missing))} "
            f"(available columns: {available})"
        )


def positive_int_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """Column as int64, every value an integer >= 1; else raise naming line and value."""
    text = frame[column].astype(str)
    well_formed = text.str.fullmatch(_COUNT_PATTERN).to_numpy(dtype=bool)
    if not well_formed.all():
        line = first_line_where(frame.index, ~well_formed)
        raise WorkloadError(f"{path}:{line}: {_describe_bad_count(column, text.loc[line])}")
    values = text.str.strip().astype(np.int64).to_numpy()
    nonpositive = values < 1
    if nonpositive.any():
        line = first_line_where(frame.index, nonpositive)
        raise WorkloadError(
            f"{path}:{line}: {column} is 0 (expected an integer >= 1: "
            "every request has at least one token)"
        )
    return values


def first_line_where(lines: pd.Index, mask: np.ndarray) -> int:
    """File line of the first row where ``mask`` is true (``lines`` from ``read_csv_text``)."""
    return int(lines.to_numpy()[np.flatnonzero(mask)[0]])


def _describe_bad_count(column: str, value: str) -> str:
    stripped = value.strip()
    if not stripped:
        return f"missing {column} (expected an integer >= 1)"
    if stripped.isascii() and stripped.isdigit():
        return f"{column} {shown(stripped)} is too large (expected at most 18 digits)"
    try:
        number = float(stripped)
    except ValueError:
        return f"{column} {shown(stripped)} is not a number (expected an integer >= 1)"
    if number < 0:
        return f"{column} {shown(stripped)} is negative (expected an integer >= 1)"
    return f"{column} {shown(stripped)} is not a whole number (expected an integer >= 1)"
