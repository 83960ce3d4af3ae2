"""Mooncake (Kimi, FAST'25) JSONL traces: one JSON object per line.

``{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}``:
``timestamp`` in milliseconds from the start of the trace, ``hash_ids`` one id per 512-token
block of the prompt (equal ids mark a shared prefix block). The ids are kept on the trace
(``PrefixBlocks``) for prefix caching; other keys are ignored.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from batchsim.workloads.errors import WorkloadError, shown
from batchsim.workloads.prefix_blocks import MOONCAKE_BLOCK_TOKENS, PrefixBlocks
from batchsim.workloads.traces.raw import RawTrace, TraceOptions

_EXAMPLE = '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}'


def parse_mooncake(path: Path, options: TraceOptions) -> RawTrace:
    """Every non-blank line a request; any bad line raises naming its number."""
    del options  # nothing to choose for this format
    times: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    blocks: list[list[int]] = []
    for number, line in _lines(path):
        row = _parse_object(line, path, number)
        where = f"{path}:{number}"
        times.append(_time_ms(row, where))
        prompt.append(_count(row, "input_length", where))
        output.append(_count(row, "output_length", where))
        blocks.append(_block_ids(row, where))
    if not times:
        raise WorkloadError(f"{path}:1: no requests (expected one JSON object per line, "
                            f"e.g. {_EXAMPLE})")
    return RawTrace(
        arrival_ns=np.rint(np.asarray(times) * 1e6).astype(np.int64),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        prefix_blocks=PrefixBlocks.from_lists(blocks, MOONCAKE_BLOCK_TOKENS),
    )


def _lines(path: Path) -> list[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory (expected a JSONL file)") from None
    except (UnicodeDecodeError, OSError) as err:
        raise WorkloadError(f"{path}: cannot read file ({err})") from None
    return [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _parse_object(line: str, path: Path, number: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise WorkloadError(f"{path}:{number}: not valid JSON ({err.msg} at column "
                            f"{err.colno}; expected e.g. {_EXAMPLE})") from None
    if not isinstance(row, dict):
        raise WorkloadError(f"{path}:{number}: a JSON {type(row).__name__}, expected an object "
                            f"such as {_EXAMPLE}")
    return row


def _field(row: dict[str, Any], key: str, where: str) -> Any:
    if key not in row:
        raise WorkloadError(f"{where}: missing {key!r} (expected e.g. {_EXAMPLE})")
    return row[key]


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python, but `true` is not a count or a time.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _time_ms(row: dict[str, Any], where: str) -> float:
    value = _field(row, "timestamp", where)
    if not (_is_number(value) and math.isfinite(value) and value >= 0):
        raise WorkloadError(f"{where}: timestamp {shown(value)} is not a number >= 0 "
                            "(expected milliseconds from the start of the trace)")
    return float(value)


def _count(row: dict[str, Any], key: str, where: str) -> int:
    value = _field(row, key, where)
    if not (_is_number(value) and float(value).is_integer() and value >= 1):
        raise WorkloadError(f"{where}: {key} {shown(value)} is not an integer >= 1 "
                            "(every request has at least one token)")
    return int(value)


def _block_ids(row: dict[str, Any], where: str) -> list[int]:
    value = _field(row, "hash_ids", where)
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise WorkloadError(f"{where}: hash_ids must be a list of integers >= 0 "
                            f"(one id per {MOONCAKE_BLOCK_TOKENS}-token prompt block)")
    return value
