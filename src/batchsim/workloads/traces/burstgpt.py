"""BurstGPT (Wang et al., KDD'25): ChatGPT / GPT-4 request logs from Azure OpenAI.

``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``; ``Timestamp`` is
seconds from the start of the log. Failed requests are logged with 0 response tokens (and some
rows have 0 request tokens); a simulated request needs at least one of each, so such rows are
either an error (the default, naming the first) or dropped and counted (``failed_rows:
drop``) -- never silently. Columns are found by name, so the later files with extra columns
(``Session ID``, ``Elapsed time``) load too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.traces.checks import (
    nonnegative_int_column,
    nonnegative_number_column,
    numbers_to_ns,
)
from batchsim.workloads.traces.csv_text import read_csv_text, require_columns
from batchsim.workloads.traces.raw import RawTrace, TraceOptions

TIME, PROMPT, OUTPUT = "Timestamp", "Request tokens", "Response tokens"


def parse_burstgpt(path: Path, options: TraceOptions) -> RawTrace:
    """Rows with 0 request or response tokens follow ``options.failed_rows``."""
    frame = read_csv_text(path)
    require_columns(frame, path, (TIME, PROMPT, OUTPUT))
    if frame.empty:
        raise WorkloadError(f"{path}:2: no requests after the header (expected at least one row)")
    seconds = nonnegative_number_column(frame, TIME, path)
    prompt = nonnegative_int_column(frame, PROMPT, path)
    output = nonnegative_int_column(frame, OUTPUT, path)
    failed = output == 0
    empty = (prompt == 0) & ~failed
    unusable = failed | empty
    if options.failed_rows == "error" and unusable.any():
        row = int(np.flatnonzero(unusable)[0])
        why = f"{OUTPUT} is 0, a failed request" if failed[row] else f"{PROMPT} is 0"
        raise WorkloadError(f"{path}:{frame.index[row]}: {why} (expected >= 1; set "
                            "failed_rows: drop to skip such rows, counted in the summary)")
    keep = ~unusable
    if not keep.any():
        raise WorkloadError(f"{path}: every row has 0 request or response tokens "
                            "(expected at least one usable request)")
    notes: tuple[str, ...] = ()
    if unusable.any():
        notes = (f"{path.name}: dropped {int(unusable.sum())} of {unusable.size} rows "
                 f"(failed_rows: drop): {int(failed.sum())} failed with 0 {OUTPUT}, "
                 f"{int(empty.sum())} with 0 {PROMPT}",)
    return RawTrace(arrival_ns=numbers_to_ns(seconds[keep], "s"), prompt_tokens=prompt[keep],
                    output_tokens=output[keep], notes=notes)

