"""The trace formats ``load_trace`` knows: one parser per module beside this one, one entry here.

A parser only decodes its format and validates rows (naming the line of any bad one); the
format-independent work (sorting, rebasing time to 0) lives in ``replay.py``. Adding a format
means one parser module and one entry in ``TRACE_PARSERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from batchsim.workloads.traces.azure2023 import parse_azure2023_trace
from batchsim.workloads.traces.azure2024 import parse_azure2024
from batchsim.workloads.traces.burstgpt import parse_burstgpt
from batchsim.workloads.traces.column_map import parse_csv, parse_parquet
from batchsim.workloads.traces.mooncake import parse_mooncake
from batchsim.workloads.traces.raw import RawTrace, TraceOptions

# A parser takes the file and the format options (a format ignores those not its own).
TraceParser = Callable[[Path, TraceOptions], RawTrace]

TRACE_PARSERS: dict[str, TraceParser] = {
    "azure2023": parse_azure2023_trace,
    "azure2024": parse_azure2024,
    "mooncake": parse_mooncake,
    "burstgpt": parse_burstgpt,
    "csv": parse_csv,
    "parquet": parse_parquet,
}
