"""The schema reference cannot go stale, and every example experiment in the docs validates."""

import re
from pathlib import Path

import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.reference_doc import generated_section, render_schema_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"
REFERENCE = DOCS / "reference" / "experiment.md"
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def example_experiments() -> list[tuple[str, str]]:
    """``(where, text)`` of every ```yaml block in docs/ that starts with ``name:``."""
    examples = []
    for doc in sorted(DOCS.rglob("*.md")):
        for number, match in enumerate(YAML_BLOCK.finditer(doc.read_text("utf-8")), start=1):
            if match.group(1).startswith("name:"):
                examples.append((f"{doc.relative_to(DOCS)}#{number}", match.group(1)))
    return examples


def test_reference_tables_match_the_schema() -> None:
    assert generated_section(REFERENCE.read_text("utf-8")) == render_schema_markdown(), (
        "docs/reference/experiment.md is stale: run "
        "`python -m batchsim.experiment.reference_doc docs/reference/experiment.md`"
    )


def test_reference_has_a_complete_example() -> None:
    assert any(where.startswith("reference/experiment.md") for where, _ in example_experiments())


EXAMPLES = example_experiments()


@pytest.mark.parametrize(("where", "text"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_example_experiment_validates(where: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "example.yaml"
    path.write_text(text, encoding="utf-8")
    exp, _ = load_experiment(path)
    assert exp.policies, where


def test_reference_example_uses_static_and_continuous_arms(tmp_path: Path) -> None:
    [(_, text), *_] = [ex for ex in example_experiments() if ex[0].startswith("reference/")]
    path = tmp_path / "example.yaml"
    path.write_text(text, encoding="utf-8")
    exp, _ = load_experiment(path)
    assert {arm.kind for arm in exp.policies} >= {"static", "continuous"}
