"""What a plan writes: plan.json (everything), plan.md (the tables), pareto.png, and
report.html (the tables and the front in one page)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batchsim.apps.plan.pareto import pareto_front, pareto_points
from batchsim.apps.plan.planner import PlanResult
from batchsim.apps.plan.records import all_evaluations
from batchsim.apps.plan.report_page import write_plan_report
from batchsim.apps.plan.tables import TextTable, all_tables

PLAN_JSON, PLAN_MD, PARETO_PNG = "plan.json", "plan.md", "pareto.png"


def markdown_table(table: TextTable) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([f"### {table.title}", "", line(table.headers),
                      line(["---"] * len(table.headers)), *(line(row) for row in table.rows)])


def plan_markdown(document: dict[str, Any]) -> str:
    slo = ", ".join(f"{key} ≤ {value:g}" for key, value in document["slo"].items()
                    if value is not None)
    head = [f"# Capacity plan: {document['config']['name']}", "",
            f"SLO: {slo} (p99 over the measured requests, rejected requests counting as "
            f"misses; judged on the upper end of the 95% interval over "
            f"{document['replications']} replications — the p99 columns show that judged "
            "value). Every run must also keep up with its load (no growing queue). Other "
            "numbers are means over replications; `plan.json` has every run.", "",
            f"![Pareto front]({PARETO_PNG})", "", ""]
    return "\n".join(head) + "\n\n".join(markdown_table(t) for t in all_tables(document)) + "\n"


def write_plan(out_dir: Path, result: PlanResult, document: dict[str, Any]) -> list[Path]:
    from batchsim.apps.plan.pareto_plot import draw_pareto  # matplotlib only when drawing

    out_dir.mkdir(parents=True, exist_ok=True)
    plan_json = out_dir / PLAN_JSON
    plan_json.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n",
                         encoding="utf-8")
    plan_md = out_dir / PLAN_MD
    plan_md.write_text(plan_markdown(document), encoding="utf-8")
    panels = []
    for variant_plan in result.variants:
        points = pareto_points(all_evaluations(variant_plan))
        panels.append((variant_plan.variant.name, points, pareto_front(points)))
    arms: list[str] = []  # every variant's arms, in order (a what-if may rename or add one)
    for variant_plan in result.variants:
        arms += [a.name for a in variant_plan.variant.exp.policies if a.name not in arms]
    png = draw_pareto(panels, arms, out_dir / PARETO_PNG)
    return [plan_json, plan_md, png, write_plan_report(out_dir, document, png)]
