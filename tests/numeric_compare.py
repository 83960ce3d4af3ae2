"""Compare documents and rendered texts by their numbers, within a stated tolerance.

For outputs of third-party iterative or floating-point library arithmetic: the calibration
fit (least squares through BLAS and LAPACK), numpy's SIMD transcendental functions (exp, log,
power: different code on CPUs with and without AVX-512). Those differ in their last bits
between builds and machines, so a refit or a re-rendered report is compared with the
committed file number by number, never byte for byte. Everything that is not a number
(structure, keys, strings, booleans, integers) must still be identical.

Outputs computed by batchsim's own arithmetic alone (the simulation) stay byte-identical and
are not compared through this module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

DocPath = tuple[str | int, ...]
"""Where a value sits in a document: its keys and list indices from the root."""


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far two floats may differ: `math.isclose(actual, expected, rel_tol, abs_tol)`."""

    rel: float = 1e-9
    abs: float = 1e-15

    def allows(self, actual: float, expected: float) -> bool:
        if math.isnan(actual) or math.isnan(expected):
            return math.isnan(actual) and math.isnan(expected)
        return math.isclose(actual, expected, rel_tol=self.rel, abs_tol=self.abs)


def document_differences(
    actual: Any,
    expected: Any,
    *,
    tolerance: Tolerance | Callable[[DocPath], Tolerance] = Tolerance(),
    numbers_in_text: Callable[[DocPath], bool] = lambda path: False,
) -> list[str]:
    """Every difference between two parsed documents (YAML or JSON: dicts, lists, scalars);
    empty when they match.

    Mappings must have the same keys in the same order, lists the same length, and every
    value the same type. Floats are compared within `tolerance` (one for all, or one per
    path); strings exactly, except those at paths where `numbers_in_text` is true, which are
    compared as `text_differences` compares texts. Everything else must be equal.
    """
    rule = tolerance if callable(tolerance) else (lambda path: tolerance)
    differences: list[str] = []
    _walk(actual, expected, (), rule, numbers_in_text, differences)
    return differences


def assert_documents_match(actual: Any, expected: Any, **options: Any) -> None:
    """`document_differences` must find none (its options are this function's)."""
    differences = document_differences(actual, expected, **options)
    assert not differences, "\n".join(differences)


_NUMBER = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?!\w|\.\d)")
"""A number standing on its own in a text (not a digit inside a word such as `h200`)."""


def text_differences(actual: str, expected: str, *, where: str = "text") -> list[str]:
    """Every line where two rendered texts differ other than in the last printed digit of a
    rounded number; empty when they match.

    The texts must be identical once their numbers are taken out. A number printed with a
    fractional part or an exponent, or followed by `%`, was rounded when it was written:
    the two may differ by one unit of the coarser one's last printed digit (`6.2%` and
    `6.3%`; `0.8412` and `0.8413`), as two values a last bit apart round to neighbours at a
    rounding boundary. Any other number (a row count, a token count) must be identical.
    """
    actual_lines, expected_lines = actual.splitlines(), expected.splitlines()
    differences = [
        f"{where}, line {number}: {got!r} != expected {want!r}"
        for number, (got, want) in enumerate(zip(actual_lines, expected_lines, strict=False), 1)
        if not _line_matches(got, want)
    ]
    if len(actual_lines) != len(expected_lines):
        differences.append(
            f"{where}: {len(actual_lines)} lines != expected {len(expected_lines)}")
    return differences


def _walk(actual: Any, expected: Any, path: DocPath, tolerance: Callable[[DocPath], Tolerance],
          numbers_in_text: Callable[[DocPath], bool], out: list[str]) -> None:
    where = _name(path)
    if type(actual) is not type(expected):
        out.append(f"{where}: {type(actual).__name__} {actual!r} != expected "
                   f"{type(expected).__name__} {expected!r}")
    elif isinstance(expected, dict):
        if list(actual) != list(expected):
            out.append(f"{where}: keys {list(actual)} != expected {list(expected)}")
            return
        for key in expected:
            _walk(actual[key], expected[key], (*path, key), tolerance, numbers_in_text, out)
    elif isinstance(expected, list):
        if len(actual) != len(expected):
            out.append(f"{where}: {len(actual)} items != expected {len(expected)}")
            return
        for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
            _walk(got, want, (*path, index), tolerance, numbers_in_text, out)
    elif isinstance(expected, float):
        rule = tolerance(path)
        if not rule.allows(actual, expected):
            out.append(f"{where}: {actual!r} != expected {expected!r} "
                       f"(rel={rule.rel:g}, abs={rule.abs:g})")
    elif isinstance(expected, str) and numbers_in_text(path):
        out.extend(text_differences(actual, expected, where=where))
    elif actual != expected:
        out.append(f"{where}: {actual!r} != expected {expected!r}")


def _name(path: DocPath) -> str:
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
    return text.removeprefix(".") or "the document"


def _line_matches(actual: str, expected: str) -> bool:
    got, want = _NUMBER.split(actual), _NUMBER.split(expected)
    if len(got) != len(want):
        return False
    # split() alternates text (even indices) and the numbers between (odd indices).
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        if index % 2 == 0:
            if a != b:
                return False
        elif not _numbers_match(a, b, got[index + 1], want[index + 1]):
            return False
    return True


def _numbers_match(actual: str, expected: str, after_actual: str, after_expected: str) -> bool:
    rounded = [_is_rounded(actual, after_actual), _is_rounded(expected, after_expected)]
    if not any(rounded):
        return actual == expected
    a, b = Decimal(actual), Decimal(expected)
    unit = max(Decimal(1).scaleb(a.as_tuple().exponent), Decimal(1).scaleb(b.as_tuple().exponent))
    return abs(a - b) <= unit


def _is_rounded(number: str, after: str) -> bool:
    return any(c in number for c in ".eE") or after.startswith("%")
