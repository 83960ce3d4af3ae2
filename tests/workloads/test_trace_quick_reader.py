"""The Azure 2023 trace's quick reader (Arrow) reads what the text path reads, the same numbers,
and leaves every file it is not sure of to the text path (which names the line of a bad row)."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import batchsim.workloads.traces.azure2023 as formats
from batchsim.workloads import WorkloadError, resolve_trace_path
from batchsim.workloads.traces.raw import RawTrace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _text_path(path: Path, monkeypatch: pytest.MonkeyPatch) -> RawTrace:
    with monkeypatch.context() as patch:
        patch.setattr(formats, "_read_clean_azure2023", lambda path: None)
        return formats.parse_azure2023(path)


def _same(quick: RawTrace, text: RawTrace) -> bool:
    return all(getattr(quick, name).dtype == getattr(text, name).dtype
               and getattr(quick, name).tobytes() == getattr(text, name).tobytes()
               for name in ("arrival_ns", "prompt_tokens", "output_tokens"))


@pytest.mark.parametrize("name", ["azure2023-conv", "azure2023-code"])
def test_the_shipped_traces_are_read_quickly_to_the_same_numbers(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = resolve_trace_path(name, Path("."))
    quick = formats._read_clean_azure2023(path)
    assert quick is not None
    assert _same(quick, _text_path(path, monkeypatch))


@pytest.mark.parametrize("body", [
    "2023-11-16 18:15:46,5,6\n\n2023-11-16 18:15:47.5,7,8\n",  # no fraction; a blank line
    "2023-11-16 18:15:46.123456789,0007,1\n1999-01-31 00:00:00.0,1,000000000000000009\n",
    "2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:50.9951690,396,109\r\n",
    "2023-11-16 18:15:46.6805900,374,44",  # no newline at the end
])
def test_plain_files_are_read_quickly_to_the_same_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    for bom in (b"", codecs.BOM_UTF8):
        path = tmp_path / "trace.csv"
        path.write_bytes(bom + (HEADER + "\n" + body).encode())
        quick = formats._read_clean_azure2023(path)
        assert quick is not None
        assert _same(quick, _text_path(path, monkeypatch))


@pytest.mark.parametrize("row", [
    " 2023-11-16 18:15:46.5,5,6", "2023-11-16 18:15:46.5, 5,6", "2023-11-16 18:15:46.5,5,6 ",
    '"2023-11-16 18:15:46.5",5,6', "2023-11-16 18:15:46.5,+5,6", "2023-11-16 18:15:46.5,5.0,6",
    "2023-11-16 18:15:46.5,1234567890123456789,6", "2023-11-16T18:15:46.5,5,6",
    "2023-11-16 18:15:46.5Z,5,6", "2023-11-16 18:15:46.1234567891,5,6",
    "2023-02-30 18:15:46.5,5,6", "2023-11-16 24:00:00,5,6", "2023-11-16 18:15:60,5,6",
    "2023-1-16 18:15:46.5,5,6", "2023-11-16 18:15:46.5,0,6", "2023-11-16 18:15:46.5,5,-6",
    ",,", "2023-11-16 18:15:46.5,5", "2023-11-16 18:15:46.5,5,6,7", "2023-11-16 18:15:46.,5,6",
])
def test_anything_unusual_is_left_to_the_text_path(tmp_path: Path, row: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(f"{HEADER}\n2023-11-16 18:15:40,1,1\n{row}\n")
    assert formats._read_clean_azure2023(path) is None


@pytest.mark.parametrize("text", [
    "", HEADER + "\n", "time,prompt,output\n2023-11-16 18:15:40,1,1\n",
    HEADER + ",Extra\n2023-11-16 18:15:40,1,1,1\n",
])
def test_no_rows_or_another_header_is_left_to_the_text_path(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    assert formats._read_clean_azure2023(path) is None


def test_a_missing_file_or_a_folder_is_left_to_the_text_path(tmp_path: Path) -> None:
    assert formats._read_clean_azure2023(tmp_path / "none.csv") is None
    assert formats._read_clean_azure2023(tmp_path) is None


_stamp = st.sampled_from([
    "2023-11-16 18:15:46.6805900", "2023-11-16 18:15:46", "2023-11-16 18:15:46.5",
    "2023-11-16 18:15:46.123456789", " 2023-11-16 18:15:46.5", "2023-11-16 18:15:46.5 ",
    "2023-11-16T18:15:46", "2023-1-6 1:2:3.5", "2023-11-16 18:15", "", "yesterday",
    "2020-02-29 00:00:00", "2021-02-29 00:00:00", "2023-11-16 18:15:46.0000000001",
])
_count = st.sampled_from(["1", "374", "007", " 5", "5 ", "0", "-3", "+3", "2.5", "1e3", "",
                          "999999999999999999", "1000000000000000000", "0000000000000000001",
                          "\t7", "٣"])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_stamp, _count, _count), min_size=1, max_size=6))
def test_when_the_quick_reader_reads_a_file_the_text_path_reads_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        rows: list[tuple[str, str, str]]) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n" + "".join(",".join(row) + "\n" for row in rows))
    quick = formats._read_clean_azure2023(path)
    try:
        text = _text_path(path, monkeypatch)
    except WorkloadError:
        assert quick is None
        return
    assert quick is None or _same(quick, text)
