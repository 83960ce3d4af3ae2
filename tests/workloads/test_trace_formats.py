"""Trace loaders beyond Azure 2023: Azure 2024, Mooncake, BurstGPT, generic CSV / Parquet.

Real rows: the shipped Mooncake slice, and the first rows of Azure 2024 and BurstGPT in the
fixtures of tests/workloads/data (their README says which rows are real). Malformed inputs
are written here; every error must name the file, the line (or Parquet row) and what was
expected, on one line.
"""

from __future__ import annotations

import json
import tomllib
from fnmatch import fnmatch
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from batchsim.workloads import WorkloadError, load_trace, resolve_trace_path
from batchsim.workloads.traces.raw import ColumnMap, TraceOptions
from batchsim.workloads.traces.replay import _SHIPPED_FILES

DATA = Path(__file__).parent / "data"
DROP = TraceOptions(failed_rows="drop")


def _write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path, format: str, options: TraceOptions | None = None) -> str:
    with pytest.raises(WorkloadError) as info:
        load_trace(path, format, options)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- Azure 2024 ------------------------------------------------------------------------------


def test_azure2024_reads_offsets_and_timestamps_without_fraction() -> None:
    trace = load_trace(DATA / "azure2024_sample.csv", "azure2024")
    # 00:00:00.009930 is time 0; "00:00:01+00:00" has no fractional part.
    assert trace.arrival_s.tolist() == pytest.approx([0.0, 0.513171, 0.99007, 1.24007, 2.99007])
    assert trace.prompt_tokens.tolist() == [2162, 1043, 318, 4410, 77]
    assert trace.output_tokens.tolist() == [5, 231, 12, 389, 1]
    assert trace.prefix_blocks is None and trace.notes == ()


def test_azure2024_converts_other_offsets_to_utc(tmp_path: Path) -> None:
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2024-05-10 02:00:00.5+02:00,10,2\n2024-05-10 00:00:00+00:00,20,3\n")
    trace = load_trace(_write(tmp_path, text, "t.csv"), "azure2024")
    assert trace.arrival_s.tolist() == [0.0, 0.5]
    assert trace.prompt_tokens.tolist() == [20, 10]


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ("2024-05-10 00:00:02,10,1", "unparseable TIMESTAMP '2024-05-10 00:00:02' (expected "
                                     "e.g. '2024-05-10 00:00:00.009930+00:00')"),
        ("2024-05-10T00:00:02Z,10,1", "unparseable TIMESTAMP"),
        (",10,1", "missing TIMESTAMP"),
        ("2024-05-10 00:00:02+00:00,0,1", "ContextTokens is 0"),
        ("2024-05-10 00:00:02+00:00,10,x", "GeneratedTokens 'x' is not a number"),
    ],
)
def test_azure2024_bad_rows_name_the_line(tmp_path: Path, row: str, fragment: str) -> None:
    text = (DATA / "azure2024_sample.csv").read_text() + row + "\n"
    message = _error(_write(tmp_path, text, "bad.csv"), "azure2024")
    assert "bad.csv:7: " in message and fragment in message


def test_azure2024_header_is_checked(tmp_path: Path) -> None:
    path = _write(tmp_path, "time,in,out\n2024-05-10 00:00:00+00:00,1,1\n", "h.csv")
    assert "h.csv:1: header is 'time,in,out' (expected 'TIMESTAMP," in _error(path, "azure2024")


# --- Mooncake --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mooncake_path() -> Path:
    return resolve_trace_path("mooncake-conversation", Path("."))


def test_mooncake_slice_first_rows_and_prefix_blocks(mooncake_path: Path) -> None:
    trace = load_trace(mooncake_path, "mooncake")
    assert len(trace) == 918
    assert trace.arrival_s[-1] == pytest.approx(297.0)  # 297000 ms
    # The first rows of the real file (ties at t = 0 keep file order).
    assert trace.prompt_tokens[:3].tolist() == [6758, 7322, 7236]
    assert trace.output_tokens[:3].tolist() == [500, 490, 794]
    blocks = trace.prefix_blocks
    assert blocks is not None and len(blocks) == 918 and blocks.block_tokens == 512
    assert blocks.blocks_of(0).tolist() == list(range(14))
    assert blocks.blocks_of(1).tolist() == [0, *range(14, 28)]
    # One id per 512-token block of the prompt, for every request.
    np.testing.assert_array_equal(blocks.counts(), -(-trace.prompt_tokens // 512))


def test_mooncake_sorts_rows_with_their_block_ids(tmp_path: Path) -> None:
    rows = [{"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]},
            {"timestamp": 500.5, "input_length": 10, "output_length": 1, "hash_ids": [9]},
            {"timestamp": 1000, "input_length": 1, "output_length": 2, "hash_ids": []}]
    text = "\n".join(json.dumps(r) for r in rows) + "\n\n"
    trace = load_trace(_write(tmp_path, text, "m.jsonl"), "mooncake")
    assert trace.arrival_s.tolist() == [0.0, 0.4995, 1.4995]
    assert trace.prompt_tokens.tolist() == [10, 1, 600]
    assert trace.prefix_blocks is not None
    assert [trace.prefix_blocks.blocks_of(i).tolist() for i in range(3)] == [[9], [], [7, 8]]


GOOD = '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0]}'


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"timestamp": 0, "input_length": 5', "not valid JSON"),
        ("[1, 2]", "a JSON list, expected an object"),
        ('{"input_length": 5, "output_length": 2, "hash_ids": []}', "missing 'timestamp'"),
        ('{"timestamp": -3, "input_length": 5, "output_length": 2, "hash_ids": []}',
         "timestamp -3 is not a number >= 0 (expected milliseconds"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 2, "hash_ids": []}',
         "input_length 0 is not an integer >= 1"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 2.5, "hash_ids": []}',
         "output_length 2.5 is not an integer >= 1"),
        ('{"timestamp": 1, "input_length": true, "output_length": 2, "hash_ids": []}',
         "input_length True is not an integer"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 2}', "missing 'hash_ids'"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": [1, "a"]}',
         "hash_ids must be a list of integers >= 0"),
    ],
)
def test_mooncake_bad_lines_name_the_line(tmp_path: Path, line: str, fragment: str) -> None:
    path = _write(tmp_path, f"{GOOD}\n\n{GOOD}\n{line}\n", "bad.jsonl")
    message = _error(path, "mooncake")
    assert "bad.jsonl:4: " in message and fragment in message


def test_mooncake_empty_file(tmp_path: Path) -> None:
    assert "e.jsonl:1: no requests" in _error(_write(tmp_path, "\n", "e.jsonl"), "mooncake")


# --- BurstGPT --------------------------------------------------------------------------------


def test_burstgpt_failed_rows_are_an_error_by_default() -> None:
    message = _error(DATA / "burstgpt_sample.csv", "burstgpt")
    assert "burstgpt_sample.csv:5: Response tokens is 0, a failed request" in message
    assert "failed_rows: drop" in message


def test_burstgpt_drop_skips_and_counts_failed_rows() -> None:
    trace = load_trace(DATA / "burstgpt_sample.csv", "burstgpt", DROP)
    assert trace.arrival_s.tolist() == [0.0, 40.0, 113.0, 147.5]  # seconds, from 5 s
    assert trace.prompt_tokens.tolist() == [472, 1087, 417, 861]
    assert trace.output_tokens.tolist() == [18, 230, 276, 97]
    [note] = trace.notes
    assert note == ("burstgpt_sample.csv: dropped 3 of 7 rows (failed_rows: drop): 2 failed "
                    "with 0 Response tokens, 1 with 0 Request tokens")


def test_burstgpt_finds_columns_by_name(tmp_path: Path) -> None:
    # BurstGPT_3 inserts Session ID and Elapsed time after Timestamp.
    text = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
            "Total tokens,Log Type\n3,abc,1.5,ChatGPT,10,20,30,Conversation log\n"
            "4,,2.0,GPT-4,11,21,32,API log\n")
    trace = load_trace(_write(tmp_path, text, "b3.csv"), "burstgpt")
    assert trace.prompt_tokens.tolist() == [10, 11] and trace.arrival_s.tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("row", "line", "fragment"),
    [
        ("x,ChatGPT,1,1,2,API log", 3, "Timestamp 'x' is not a number >= 0"),
        ("-1,ChatGPT,1,1,2,API log", 3, "Timestamp '-1' is not a number >= 0"),
        ("9,ChatGPT,-4,1,2,API log", 3, "Request tokens '-4' is negative (expected an "
                                        "integer >= 0)"),
        ("9,ChatGPT,4,,2,API log", 3, "missing Response tokens"),
        ("9,ChatGPT,0,3,3,API log", 3, "Request tokens is 0"),
    ],
)
def test_burstgpt_bad_rows_name_the_line(tmp_path: Path, row: str, line: int,
                                         fragment: str) -> None:
    text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    text += "5,ChatGPT,472,18,490,Conversation log\n" + row + "\n"
    message = _error(_write(tmp_path, text, "bad.csv"), "burstgpt")
    assert f"bad.csv:{line}: " in message and fragment in message


def test_burstgpt_missing_column_lists_the_available_ones(tmp_path: Path) -> None:
    path = _write(tmp_path, "Timestamp,Model,Request tokens\n1,x,2\n", "m.csv")
    message = _error(path, "burstgpt")
    assert "m.csv:1: missing column 'Response tokens'" in message
    assert "available columns: Timestamp, Model, Request tokens" in message


def test_burstgpt_with_only_failed_rows_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "Timestamp,Request tokens,Response tokens\n1,5,0\n", "f.csv")
    assert "every row has 0 request or response tokens" in _error(path, "burstgpt", DROP)


# --- generic CSV / Parquet -------------------------------------------------------------------


def _columns(unit: str = "s") -> TraceOptions:
    return TraceOptions(columns=ColumnMap("t", "in", "out", arrival_time_unit=unit))  # type: ignore[arg-type]


@pytest.mark.parametrize(("unit", "times", "expected"), [
    ("s", ["10", "10.25", "12"], [0.0, 0.25, 2.0]),
    ("ms", ["1500", "1000", "4000"], [0.5, 0.0, 3.0]),
    ("us", ["0", "250000", "1e6"], [0.0, 0.25, 1.0]),
    ("datetime", ["2024-05-10T00:00:01Z", "2024-05-10 00:00:01.5+00:00",
                  "2024-05-10 02:00:03+02:00"], [0.0, 0.5, 2.0]),
])
def test_csv_column_map_and_time_units(tmp_path: Path, unit: str, times: list[str],
                                       expected: list[float]) -> None:
    rows = "".join(f"{t},x,{i + 1},{10 * (i + 1)}\n" for i, t in enumerate(times))
    path = _write(tmp_path, "t,other,in,out\n" + rows, "g.csv")
    trace = load_trace(path, "csv", _columns(unit))
    assert trace.arrival_s.tolist() == pytest.approx(sorted(expected))
    assert len(trace) == 3 and trace.output_tokens.sum() == 60


@pytest.mark.parametrize(("row", "fragment"), [
    ("abc,1,1", "t 'abc' is not a number >= 0 (expected a time"),
    ("3,0,1", "in is 0"),
    ("3,1,", "missing out"),
])
def test_csv_bad_rows_name_the_line(tmp_path: Path, row: str, fragment: str) -> None:
    path = _write(tmp_path, f"t,in,out\n1,2,3\n{row}\n", "g.csv")
    message = _error(path, "csv", _columns())
    assert "g.csv:3: " in message and fragment in message


def test_csv_missing_mapped_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "time,in,out\n1,2,3\n", "g.csv")
    assert "g.csv:1: missing column 't' (available columns: time, in, out)" in _error(
        path, "csv", _columns())


def test_csv_without_a_column_map_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "t,in,out\n1,2,3\n", "g.csv")
    assert "format 'csv' needs a column map" in _error(path, "csv")


def test_parquet_numeric_and_timestamp_columns(tmp_path: Path) -> None:
    path = tmp_path / "g.parquet"
    pd.DataFrame({"t": [2.0, 0.5, 1.0], "in": [3, 1, 2], "out": [30, 10, 20]}).to_parquet(path)
    trace = load_trace(path, "parquet", _columns())
    assert trace.arrival_s.tolist() == [0.0, 0.5, 1.5]
    assert trace.prompt_tokens.tolist() == [1, 2, 3]
    stamps = pd.to_datetime(["2024-05-10 00:00:01", "2024-05-10 00:00:00.25"],
                            format="ISO8601", utc=True)
    pd.DataFrame({"t": stamps, "in": [1, 2], "out": [3, 4]}).to_parquet(path)
    assert load_trace(path, "parquet", _columns("datetime")).arrival_s.tolist() == [0.0, 0.75]


@pytest.mark.parametrize(("frame", "fragment"), [
    (pd.DataFrame({"t": [0.0, 1.0], "in": [1, 0], "out": [1, 1]}), "row 2: in is 0"),
    (pd.DataFrame({"t": [0.0, None], "in": [1, 2], "out": [1, 1]}), "row 2: t is nan"),
    (pd.DataFrame({"t": [0.0, 1.0], "in": [1.0, 2.5], "out": [1, 1]}), "row 2: in is 2.5"),
    (pd.DataFrame({"t": ["a", "b"], "in": [1, 2], "out": [1, 1]}), "column 't' has type"),
    (pd.DataFrame({"time": [0.0], "in": [1], "out": [1]}), "missing column 't' (available "
                                                           "columns: time, in, out)"),
])
def test_parquet_bad_values_name_the_row(tmp_path: Path, frame: pd.DataFrame,
                                         fragment: str) -> None:
    path = tmp_path / "bad.parquet"
    frame.to_parquet(path)
    message = _error(path, "parquet", _columns())
    assert str(path) in message and fragment in message


def test_parquet_that_is_not_parquet(tmp_path: Path) -> None:
    path = _write(tmp_path, "t,in,out\n1,2,3\n", "fake.parquet")
    assert "not a readable Parquet file" in _error(path, "parquet", _columns())


# --- shipped slices --------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["mooncake", "lengths", "servegen"])
def test_shipped_slices_carry_their_licence_source_and_cut(folder: str) -> None:
    root = files("batchsim.data").joinpath(f"traces/{folder}")
    assert "Apache License" in root.joinpath("LICENSE").read_text()
    readme = root.joinpath("README.md").read_text()
    assert "How the slice was cut" in readme and "Apache" in readme


def test_every_shipped_file_is_listed_as_package_data() -> None:
    """A non-editable install only carries files matching pyproject's package-data globs."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["batchsim.data"]
    for name, relative in _SHIPPED_FILES.items():
        assert any(fnmatch(relative, pattern.replace("**/", "*/")) for pattern in patterns), name
        assert (Path(str(files("batchsim.data"))) / relative).stat().st_size < 1_000_000, name
