"""Trace replay: the shipped Azure traces, time scaling, path resolution, malformed files."""

from __future__ import annotations

import time
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from batchsim.workloads import (
    SHIPPED_TRACES,
    TraceRequests,
    WorkloadError,
    apply_time_scale,
    load_trace,
    resolve_trace_path,
)

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW_1 = "2023-11-16 18:15:46.6805900,374,44\n"
ROW_2 = "2023-11-16 18:15:50.9951690,396,109\n"
ROW_3 = "2023-11-16 18:15:51.2000000,10,1\n"


@pytest.fixture(scope="module")
def conv_path() -> Path:
    return resolve_trace_path("azure2023-conv", Path("/nonexistent"))


@pytest.fixture(scope="module")
def conv(conv_path: Path) -> TraceRequests:
    return load_trace(conv_path)


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_conv_trace_loads_every_request_in_time_order(
    conv: TraceRequests, conv_path: Path
) -> None:
    assert len(conv) == 19_366
    assert conv.arrival_s.dtype == np.float64
    assert conv.prompt_tokens.dtype == np.int64 and conv.output_tokens.dtype == np.int64
    assert conv.arrival_s[0] == 0.0
    assert np.all(np.diff(conv.arrival_s) >= 0)
    assert conv.prompt_tokens.min() >= 1 and conv.output_tokens.min() >= 1
    assert conv.source == str(conv_path)
    # Cross-check against an independent read of the same file.
    table = pd.read_csv(conv_path)
    assert conv.prompt_tokens.sum() == table["ContextTokens"].sum()
    assert conv.output_tokens.sum() == table["GeneratedTokens"].sum()
    stamps = pd.to_datetime(table["TIMESTAMP"])
    assert conv.arrival_s[-1] == pytest.approx((stamps.max() - stamps.min()).total_seconds())
    assert conv.arrival_s[-1] == pytest.approx(3501.7, abs=0.1)


def test_shipped_code_trace_loads_every_request() -> None:
    code = load_trace(resolve_trace_path("azure2023-code", Path(".")))
    assert len(code) == 8_819
    assert code.arrival_s[-1] == pytest.approx(3435.9, abs=0.1)


def test_every_shipped_trace_is_package_data_with_its_attribution() -> None:
    for name in SHIPPED_TRACES:
        assert resolve_trace_path(name, Path(".")).is_file()
    readme = files("batchsim.data").joinpath("traces/azure2023/README.md").read_text()
    assert "CC-BY-4.0" in readme and "Splitwise" in readme


def test_loading_the_conv_trace_is_fast(conv_path: Path) -> None:
    start = time.perf_counter()
    load_trace(conv_path)
    assert time.perf_counter() - start < 1.0


def test_time_scale_half_halves_the_span_and_keeps_the_shape(conv: TraceRequests) -> None:
    faster = apply_time_scale(conv.arrival_s, 0.5)
    assert faster[-1] == pytest.approx(conv.arrival_s[-1] / 2)
    gaps, fast_gaps = np.diff(conv.arrival_s), np.diff(faster)
    assert fast_gaps.std() / fast_gaps.mean() == pytest.approx(gaps.std() / gaps.mean())
    assert conv.arrival_s[-1] == pytest.approx(3501.7, abs=0.1)  # input untouched


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_time_scale_must_be_positive(scale: float) -> None:
    with pytest.raises(ValueError):
        apply_time_scale(np.array([0.0, 1.0]), scale)


def test_out_of_order_rows_are_sorted_stably_with_their_token_counts(tmp_path: Path) -> None:
    same_time = "2023-11-16 18:15:50.9951690,1,2\n"
    trace = load_trace(_write(tmp_path, HEADER + ROW_3 + ROW_2 + same_time + ROW_1))
    assert trace.arrival_s.tolist() == pytest.approx([0.0, 4.314579, 4.314579, 4.5194100])
    assert trace.prompt_tokens.tolist() == [374, 396, 1, 10]
    assert trace.output_tokens.tolist() == [44, 109, 2, 1]


def test_timestamps_without_fraction_and_blank_lines_are_accepted(tmp_path: Path) -> None:
    text = HEADER + "2023-11-16 18:15:46,5,6\n\n2023-11-16 18:15:47.5,7,8\n"
    trace = load_trace(_write(tmp_path, text))
    assert trace.arrival_s.tolist() == [0.0, 1.5]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (HEADER + ROW_1 + ROW_2 + "2023-11-16 18:99:51.2,10,1\n", 4, "unparseable TIMESTAMP"),
        (HEADER + ROW_1 + ROW_2 + "yesterday,10,1\n", 4, "'yesterday'"),
        (HEADER + ROW_1 + "2023-11-16T18:15:50Z,10,1\n", 3, "unparseable TIMESTAMP"),
        (HEADER + ROW_1 + ",10,1\n", 3, "missing TIMESTAMP"),
        (HEADER + ROW_1 + ROW_2 + "2023-11-16 18:15:51.2,-10,1\n", 4, "negative"),
        (HEADER + ROW_1 + "2023-11-16 18:15:51.2,10,0\n", 3, "GeneratedTokens is 0"),
        (HEADER + ROW_1 + "2023-11-16 18:15:51.2,0,5\n", 3, "ContextTokens is 0"),
        (HEADER + ROW_1 + "2023-11-16 18:15:51.2,12.5,5\n", 3, "not a whole number"),
        (HEADER + ROW_1 + "2023-11-16 18:15:51.2,ten,5\n", 3, "not a number"),
        (HEADER + ROW_1 + ROW_2 + "2023-11-16 18:15:51.2,10\n", 4, "missing GeneratedTokens"),
        (HEADER + ROW_1 + "2023-11-16 18:15:51.2,10,1,9\n", 3, "row has 4 fields"),
        (HEADER + "2023-11-16 18:15:51.2,10,1,9\n" + ROW_1, 2, "row has 4 fields"),
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:51.2,10\n", 1, "header is"),
        ("time,prompt,output\n" + ROW_1, 1, "expected 'TIMESTAMP,ContextTokens,GeneratedTokens'"),
        ("", 1, "file is empty"),
        (HEADER, 2, "no requests"),
    ],
)
def test_malformed_trace_names_file_and_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = _write(tmp_path, text, name="bad_trace.csv")
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    message = str(info.value)
    assert f"bad_trace.csv:{line}: " in message
    assert fragment in message
    assert "\n" not in message


def test_missing_trace_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"no_such_trace\.csv"):
        load_trace(tmp_path / "no_such_trace.csv")


def test_unknown_format_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"unknown trace format 'sharegpt'.*azure2023"):
        load_trace(_write(tmp_path, HEADER + ROW_1), format="sharegpt")


def test_relative_trace_paths_resolve_against_the_experiment_folder(tmp_path: Path) -> None:
    trace = _write(tmp_path, HEADER + ROW_1)
    assert resolve_trace_path("trace.csv", tmp_path) == trace
    assert resolve_trace_path(str(trace), Path("/elsewhere")) == trace


def test_missing_trace_path_names_it_as_given_and_as_resolved(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError) as info:
        resolve_trace_path("data/missing.csv", tmp_path)
    message = str(info.value)
    assert "'data/missing.csv'" in message
    assert str(tmp_path / "data" / "missing.csv") in message
    assert "azure2023-conv" in message  # points at the shipped alternatives
