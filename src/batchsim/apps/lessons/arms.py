"""Reading a lesson's rows by arm: one arm's rows of a sweep, indexed by the swept value."""

from __future__ import annotations

import pandas as pd

from batchsim.apps.lessons.lesson import LessonRun


def arm_rows(run: LessonRun, arm: str, swept: str) -> pd.DataFrame:
    """The rows of `arm`, one per point, indexed by the swept key `swept` (ascending)."""
    rows = run.rows[run.rows["arm"] == arm]
    return rows.set_index(swept).sort_index()
