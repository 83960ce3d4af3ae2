"""The plan in docs/how-to/capacity-planning.md and the shipped experiments/capacity_plan.yaml
(reduced) plan, and give the answers the how-to describes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchsim.apps.executors import InProcess
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document

REPO = Path(__file__).resolve().parents[2]
HOW_TO = REPO / "docs" / "how-to" / "capacity-planning.md"
SHIPPED = REPO / "experiments" / "capacity_plan.yaml"


# The plan machinery is checked by default (tests/plan/test_plan_cli.py); the how-to's own plan
# and the answers it quotes with -m slow.
@pytest.mark.slow
def test_the_how_to_plan_runs_and_answers(tmp_path: Path) -> None:
    text = re.search(r"^```yaml\n(name:.*?)^```", HOW_TO.read_text("utf-8"),
                     re.MULTILINE | re.DOTALL)
    assert text is not None
    file = tmp_path / "plan.yaml"
    file.write_text(text.group(1), encoding="utf-8")
    document = plan_document(run_plan(file, [], tmp_path / "out", InProcess()), {})
    rates = document["answer"]["max_rate"]
    assert rates["base"]["vllm"] > rates["base"]["static"]
    assert rates["four-seqs"]["vllm"] < rates["base"]["vllm"]
    assert document["answer"]["cheapest"]["base"] == "vllm h100-sxm tp1 x1"
    ranked = document["variants"][0]["candidates"]["ranked"]
    assert {r["label"] for r in ranked if r["status"] == "does not fit"} == {
        f"{arm} h100-sxm tp3 x{n}" for arm in ("vllm", "static") for n in (1, 2)}


def _worked_example() -> tuple[dict[str, float], list[str]]:
    """The doc's worked example: each arm's base max rate, and the base row of the cheapest
    configuration table (its cells)."""
    text = HOW_TO.read_text("utf-8").split("## Worked example", 1)[1]
    rates = {m.group(1): float(m.group(2))
             for m in re.finditer(r"^\| (vllm|sarathi) \| ([\d.]+) \|", text, re.MULTILINE)}
    row = re.search(r"^\| base \| (.*) \|$", text, re.MULTILINE)
    assert set(rates) == {"vllm", "sarathi"} and row is not None
    return rates, [cell.strip() for cell in row.group(1).split("|")]


# The how-to's plan above runs by default; the shipped file's full plan with -m slow.
@pytest.mark.slow
def test_the_shipped_capacity_plan_runs_reduced(tmp_path: Path) -> None:
    """The shipped plan, base variant only, with just the runs that decide the doc's base
    answers: same durations, replications and seeds as the full plan, so these are the very
    runs the doc quotes. The bisection brackets each arm's quoted answer (it must meet, and
    half a request per second more must miss), and the candidates are the doc's cheapest base
    configuration and a TP1 one that does not fit."""
    rates, cheapest = _worked_example()
    label = re.fullmatch(r"(\w+), H100, TP(\d) × (\d)", cheapest[0])
    assert label is not None
    arm, tp, replicas = label.groups()
    low, span = min(rates.values()), 1.0  # a span of 0.5 x 2^k keeps every midpoint on the
    while low + span < max(rates.values()) + 0.5:  # full plan's 0.5 grid: the same runs
        span *= 2
    reduced = ["plan.what_if=[]", f"plan.rate.low={low}", f"plan.rate.high={low + span}",
               "plan.rate.tolerance=0.5",
               f"plan.candidates.tensor_parallel=[1,{tp}]",
               f"plan.candidates.replicas=[{replicas}]", f"plan.candidates.policies=[{arm}]"]
    document = plan_document(run_plan(SHIPPED, reduced, tmp_path, InProcess()), {})
    for search in document["variants"][0]["max_rate"]:
        assert search["status"] == "found" and search["answer"] == rates[search["arm"]]
        assert search["bracket"] == [rates[search["arm"]], rates[search["arm"]] + 0.5]
    ranked = {r["label"]: r for r in document["variants"][0]["candidates"]["ranked"]}
    best = ranked[f"{arm} h100-sxm tp{tp} x{replicas}"]
    assert best["status"] == "meets"
    p99 = {k: round(v["judged"] * 1000) for k, v in best["p99"].items()}
    assert [str(best["gpus"]), f"${best['usd_per_hour']:.2f}",
            f"${best['usd_per_million_output_tokens']:.2f}", f"{p99['ttft_p99_s']:,} ms",
            f"{p99['tpot_p99_s']:,} ms"] == cheapest[1:]
    assert ranked[f"{arm} h100-sxm tp1 x{replicas}"]["status"] == "does not fit"
