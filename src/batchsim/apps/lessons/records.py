"""A lesson's rows as plain records looked up by key (an arm, a swept value, or a tuple of
them), for the claims and tables that read single numbers: a DataFrame cell is typed as any
pandas scalar, a record's value as the number it is."""

from __future__ import annotations

from typing import Any

import pandas as pd


def by_key(rows: pd.DataFrame, *columns: str) -> dict[Any, dict[str, Any]]:
    """Each row as a {column: value} record, keyed by its value of `columns` (one column: that
    value; several: their tuple). Keys must be unique."""
    records: dict[Any, dict[str, Any]] = {}
    for record in rows.to_dict("records"):
        values = tuple(record[column] for column in columns)
        key = values[0] if len(values) == 1 else values
        if key in records:
            raise ValueError(f"two rows with {columns} = {key}")
        records[key] = {str(name): value for name, value in record.items()}
    return records
