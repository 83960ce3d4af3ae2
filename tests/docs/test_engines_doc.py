"""docs/background/engines.md shows the shipped engine profiles' own fit records."""

from pathlib import Path

from batchsim.apps.engine_fit.doc import shipped_table, with_table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "background" / "engines.md"


def test_the_fit_table_is_the_profiles_records() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert with_table(text, shipped_table()) == text, (
        "stale: run `python -m batchsim.apps.engine_fit.doc docs/background/engines.md`")
