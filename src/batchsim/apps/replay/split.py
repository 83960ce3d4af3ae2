"""A held-out split by case that does not depend on the order or the number of rows."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from batchsim.apps.replay.measured import MeasuredCase

# One case in this many is held out (a fifth).
HELD_OUT_ONE_IN = 5
SPLIT_RULE = ("a case is held out when the first 8 bytes of sha256(case id), read as a "
              f"big-endian integer, are 0 modulo {HELD_OUT_ONE_IN}")


def is_held_out(case_id: str) -> bool:
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % HELD_OUT_ONE_IN == 0


def split_cases(cases: Sequence[MeasuredCase]) -> tuple[list[MeasuredCase], list[MeasuredCase]]:
    """(fitted on, held out): each case falls on one side by its id alone."""
    fit = [case for case in cases if not is_held_out(case.case_id)]
    held_out = [case for case in cases if is_held_out(case.case_id)]
    return fit, held_out
