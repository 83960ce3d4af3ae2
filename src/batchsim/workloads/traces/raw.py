"""What every trace parser returns (``RawTrace``) and the options some formats take.

Kept apart from the parser registry (``registry.py``) so that parsers in their own modules
can import these types without importing the registry that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from batchsim.workloads.prefix_blocks import PrefixBlocks

TimeUnit = Literal["s", "ms", "us", "ns", "datetime"]

NS_PER_UNIT: dict[str, float] = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


@dataclass(frozen=True, slots=True, eq=False)
class RawTrace:
    """A trace's columns as the file gives them: absolute times, in file order."""

    arrival_ns: np.ndarray  # int64 nanoseconds on the file's own clock
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    prefix_blocks: PrefixBlocks | None = None  # per-request prompt block ids, where given
    notes: tuple[str, ...] = ()  # what the parser did that a user must hear about


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Which columns of a generic CSV/Parquet trace hold what (``format: csv | parquet``)."""

    arrival_time: str
    prompt_tokens: str
    output_tokens: str
    arrival_time_unit: TimeUnit = "s"


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """Format-specific parsing options; a format ignores the ones that are not its own."""

    failed_rows: Literal["error", "drop"] = "error"  # burstgpt: rows with 0 tokens
    columns: ColumnMap | None = None  # csv / parquet: required
