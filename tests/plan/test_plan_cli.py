"""`batchsim plan` from the command line: what it writes, that it is deterministic and
resumable, and that mistakes in the plan are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from tests.cli_checks import fails_cleanly
from tests.plan.tiny import write_experiment

PLAN = {
    "rate": {"low": 2, "high": 34, "tolerance": 8},
    "target_rate": 20,
    "candidates": {"replicas": [1, 2]},
    "price_per_gpu_hour": {"h100-sxm": 2.0},
    "what_if": [{"name": "few-seqs", "set": ["policies.vllm.max_num_seqs=4"]}],
}


def _plan(file: Path, out: Path, *extra: str) -> str:
    result = CliRunner().invoke(app, ["plan", str(file), "--out", str(out), "--jobs", "1",
                                      *extra])
    assert result.exit_code == 0, result.output
    return result.output


# Slow: tests/plan/test_plan_report.py checks the page and its rebuild on a tiny plan by default,
# and tests/plan/test_plan_runs.py that executors give the same plan.
@pytest.mark.slow
def test_plan_writes_its_answer_tables_and_front_deterministically(tmp_path: Path) -> None:
    file = write_experiment(tmp_path, PLAN)
    output = _plan(file, tmp_path / "a")
    assert "cheapest configuration meeting the SLO at 20" in output
    document = json.loads((tmp_path / "a" / "plan.json").read_text())
    answer = document["answer"]
    assert set(answer["max_rate"]) == {"base", "few-seqs"}
    # Capping continuous batching at 4 sequences lowers the rate it serves under the SLO.
    assert answer["max_rate"]["few-seqs"]["vllm"] < answer["max_rate"]["base"]["vllm"]
    assert answer["cheapest"]["base"] == "vllm h100-sxm tp1 x1"
    steps = document["variants"][0]["max_rate"][0]["steps"]
    assert [s["load"] for s in steps][:2] == [2.0, 34.0] and all("metrics" in s for s in steps)
    markdown = (tmp_path / "a" / "plan.md").read_text()
    assert "![Pareto front](pareto.png)" in markdown and "| vllm h100-sxm tp1 x1 |" in markdown
    # One replication: every output says its verdicts carry no interval (not "95% interval
    # over 1 replications").
    unsure = "judged on one run per configuration, so no verdict carries a confidence interval"
    assert unsure in " ".join(output.split()) and unsure in markdown
    assert "over 1 replications" not in markdown
    page = (tmp_path / "a" / "report.html").read_text()
    assert unsure in page
    # The ranking, the bisections and the front, embedded.
    assert page.count("<img src=\"data:image/png;base64,") == 3
    assert "vllm h100-sxm tp1 x1" in page and "Pareto front" in page
    _plan(file, tmp_path / "b")
    for name in ("plan.json", "plan.md", "pareto.png", "report.html"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    again = _plan(file, tmp_path / "a")  # every run is on disk: nothing runs again
    runs = sum(len(v["max_rate"][0]["steps"]) + len(v["max_rate"][1]["steps"])
               + len(v["candidates"]["ranked"]) for v in document["variants"])
    assert f"{runs} runs were already complete" in again


@pytest.mark.parametrize(("plan", "changes", "message"), [
    (None, {}, "no `plan:` section"),
    ({"rate": {"low": 2, "high": 4, "tolerance": 1}, "candidates": {"replicas": [1]}}, {},
     "plan.target_rate: required with candidates"),
    ({"rate": {"low": 2, "high": 4, "tolerance": 3}}, {}, "plan.rate.tolerance: must be <"),
    ({"target_rate": 5, "candidates": {"policies": ["nope"]}}, {},
     "no arm named 'nope' (arms: vllm, static)"),
    ({"target_rate": 5, "candidates": {"hardware": ["h100-sxm", "a100-sxm-80gb"]},
      "price_per_gpu_hour": {"h100-sxm": 2.0}}, {}, "no price for a100-sxm-80gb"),
    ({"target_rate": 5, "what_if": [{"name": "x", "set": ["workload.nope=1"]}]}, {},
     "plan.what_if.0 (x)"),
    ({"target_rate": 5}, {"slo": {}}, "plan.slo: no target"),
])
def test_mistakes_in_the_plan_are_one_line_errors(tmp_path: Path, plan: dict | None,
                                                  changes: dict, message: str) -> None:
    file = write_experiment(tmp_path, plan or {"target_rate": 5}, **changes)
    if plan is None:
        text = file.read_text().split("plan:")[0]
        file.write_text(text)
    result = CliRunner().invoke(app, ["plan", str(file), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_plan_with_two_replications_is_refused(tmp_path: Path) -> None:
    """With R = 2 the judged upper bound is mean + 12.7 standard errors: every verdict fails."""
    file = write_experiment(tmp_path, PLAN, replications=2)
    out = tmp_path / "o"
    message = fails_cleanly(["plan", str(file), "--out", str(out)], "replications:",
                            "12.7 standard errors", "use 1")
    assert "Traceback" not in message and not out.exists()
