"""Every example experiment in the docs and in experiments/ runs, not just validates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchsim.apps.executors import InProcess
from batchsim.apps.sweep.cli import sweep_axes
from batchsim.apps.sweep.runs import plan_sweep, run_sweep
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment

REPO = Path(__file__).resolve().parents[2]
YAML_BLOCK = re.compile(r"^```yaml\n(name:.*?)^```", re.MULTILINE | re.DOTALL)


def _doc_examples() -> list[tuple[str, str]]:
    found = []
    for doc in sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")]):
        for number, match in enumerate(YAML_BLOCK.finditer(doc.read_text("utf-8")), start=1):
            found.append((f"{doc.relative_to(REPO)}#{number}", match.group(1)))
    return found


EXAMPLES = _doc_examples()


@pytest.mark.parametrize(("where", "text"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_doc_example_runs(where: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "example.yaml"
    path.write_text(text, encoding="utf-8")
    exp, base_dir = load_experiment(path)
    if exp.sweep is not None or exp.replications > 1:  # a sweep runs every point
        plan = plan_sweep(path, [], sweep_axes(exp, []), exp.replications, tmp_path / "out")
        rows = run_sweep(plan, InProcess())
        assert len(rows) == len(plan.points) * len(exp.policies), where
        assert all(row["metrics"]["completed"] > 0 for row in rows), where
        return
    result = run_experiment(exp, base_dir)
    assert [arm.name for arm in result.arms] == [arm.name for arm in exp.policies]
    for arm in result.arms:
        assert arm.metrics["completed"] > 0, where


def test_shipped_azure_experiment_runs_on_its_first_requests() -> None:
    """The full hour is the documented demo; its first 500 requests check it end to end."""
    exp, base_dir = load_experiment(REPO / "experiments" / "azure_conv.yaml",
                                    ["workload.num_requests=500", "warmup_s=0"])
    [arm] = run_experiment(exp, base_dir).arms
    assert arm.metrics["completed"] + arm.metrics["rejected"] == 500
    assert arm.requests["prompt_tokens"].iloc[0] == 374  # the trace's first row
