"""Looking up a lesson's rows: as plain records by key (an arm, a swept value, or a tuple of
them), for the claims and tables that read single numbers (a DataFrame cell is typed as any
pandas scalar, a record's value as the number it is), or one arm's rows of a sweep."""

from __future__ import annotations

from typing import Any

import pandas as pd

from batchsim.apps.lessons.lesson import LessonRun


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


def arm_rows(run: LessonRun, arm: str, swept: str) -> pd.DataFrame:
    """The rows of `arm`, one per point, indexed by the swept key `swept` (ascending)."""
    rows = run.rows[run.rows["arm"] == arm]
    return rows.set_index(swept).sort_index()
