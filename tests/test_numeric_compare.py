"""The numeric comparison of documents and texts (tests/numeric_compare.py) tells a last-bit
difference from a real one."""

from __future__ import annotations

import pytest

from tests.numeric_compare import (
    DocPath,
    Tolerance,
    document_differences,
    text_differences,
)

_DOC = {"a": {"x": 0.7843, "flag": True, "rows": 81, "name": "gemm"},
        "list": [1.0e-6, {"y": 3315.0}], "note": "gemm 6.2% median, 81 rows"}


def _copy(**changes: object) -> dict[str, object]:
    doc = {"a": dict(_DOC["a"]), "list": [1.0e-6, {"y": 3315.0}], "note": _DOC["note"]}
    doc.update(changes)
    return doc


def test_floats_a_few_last_bits_apart_match() -> None:
    other = _copy(list=[1.0e-6 * (1 + 1e-14), {"y": 3315.0 * (1 - 1e-13)}])
    assert document_differences(other, _DOC) == []


@pytest.mark.parametrize("other", [
    _copy(list=[1.0e-6 * (1 + 1e-6), {"y": 3315.0}]),  # a float beyond rel 1e-9
    _copy(a={"x": 0.7843, "flag": False, "rows": 81, "name": "gemm"}),  # a boolean
    _copy(a={"x": 0.7843, "flag": True, "rows": 82, "name": "gemm"}),  # an integer
    _copy(a={"x": 0.7843, "flag": True, "rows": 81.0, "name": "gemm"}),  # a type
    _copy(a={"x": 0.7843, "flag": True, "rows": 81, "name": "gemv"}),  # a string
    _copy(a={"flag": True, "x": 0.7843, "rows": 81, "name": "gemm"}),  # the key order
    _copy(a={"x": 0.7843, "flag": True, "rows": 81}),  # a key
    _copy(list=[1.0e-6]),  # a list's length
    _copy(note="gemm 6.3% median, 81 rows"),  # a string, compared exactly by default
])
def test_anything_else_is_a_difference(other: dict[str, object]) -> None:
    assert document_differences(other, _DOC)


def test_tolerances_and_text_numbers_can_be_chosen_per_path() -> None:
    other = _copy(a={"x": 0.7853, "flag": True, "rows": 81, "name": "gemm"},
                  note="gemm 6.3% median, 81 rows")

    def tolerance(path: DocPath) -> Tolerance:
        return Tolerance(rel=2e-3) if path == ("a", "x") else Tolerance()

    assert document_differences(other, _DOC, tolerance=tolerance,
                                numbers_in_text=lambda path: path == ("note",)) == []
    assert document_differences(other, _DOC, tolerance=Tolerance(rel=1e-3),
                                numbers_in_text=lambda path: True) == [
        "a.x: 0.7853 != expected 0.7843 (rel=0.001, abs=1e-15)"]


@pytest.mark.parametrize(("actual", "expected"), [
    ("| gemm | 1,848 | 8.4% | 20.4% |", "| gemm | 1,848 | 8.5% | 20.3% |"),
    ("7.60 (+9%) and 6.94 (-1%)", "7.61 (+10%) and 6.93 (+0%)"),
    ("ramp 4.449e-14, power 5.406", "ramp 4.450e-14, power 5.405"),
    ("9.99 ms", "10.0 ms"),
])
def test_rounded_numbers_may_differ_by_one_unit_of_their_last_digit(
        actual: str, expected: str) -> None:
    assert text_differences(actual, expected) == []


@pytest.mark.parametrize(("actual", "expected"), [
    ("| gemm | 1,848 | 8.4% |", "| gemm | 1,848 | 8.6% |"),  # two units
    ("| gemm | 1,848 | 8.4% |", "| gemm | 1,849 | 8.4% |"),  # a whole number
    ("rows (39)", "rows (40)"),
    ("power 5.406", "power 5.416"),
    ("h200-sxm: 8.4%", "h100-sxm: 8.4%"),  # digits inside a word are text
    ("8.4% yes", "8.4% no"),
    ("one\ntwo", "one\ntwo\nthree"),
])
def test_other_differences_in_a_text_are_found(actual: str, expected: str) -> None:
    assert text_differences(actual, expected)

