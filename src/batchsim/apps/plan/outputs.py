"""What a plan writes: plan.json (everything), plan.md (the tables), pareto.png, and
report.html (the tables and the front in one page); all at once, plan.json last."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batchsim.apps.plan.pareto import pareto_front, pareto_points
from batchsim.apps.plan.planner import PlanResult
from batchsim.apps.plan.records import all_evaluations
from batchsim.apps.plan.report_page import REPORT_HTML, write_plan_report
from batchsim.apps.plan.tables import TextTable, all_tables
from batchsim.apps.plan.verdict import judged_on
from batchsim.experiment.output_folder import naming, write_text, written_atomically

PLAN_JSON, PLAN_MD, PARETO_PNG = "plan.json", "plan.md", "pareto.png"
PLAN_FILES = (PLAN_JSON, PLAN_MD, PARETO_PNG, REPORT_HTML)


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
            f"misses; {judged_on(document['replications'])} — the p99 columns show the judged "
            "value). Every run must also keep up with its load (no growing queue). Other "
            "numbers are means over replications; `plan.json` has every run.", "",
            f"![Pareto front]({PARETO_PNG})", "", ""]
    return "\n".join(head) + "\n\n".join(markdown_table(t) for t in all_tables(document)) + "\n"


def write_plan(out_dir: Path, result: PlanResult, document: dict[str, Any]) -> list[Path]:
    """The plan's own files as one step (`written_atomically`): staged and moved in beside its
    run folders with plan.json last — the plan's marker: a folder holding plan.json holds the
    whole plan. A write failure is one `OutputWriteError` that leaves the previous plan's files
    (or none) and every complete run folder, for the same command to read back."""
    with written_atomically(out_dir, marker=PLAN_JSON) as staging:
        _write_plan_files(staging, result, document)
    return [out_dir / name for name in PLAN_FILES]


def _write_plan_files(folder: Path, result: PlanResult, document: dict[str, Any]) -> None:
    from batchsim.apps.plan.pareto_plot import draw_pareto  # matplotlib only when drawing

    write_text(folder / PLAN_JSON, json.dumps(document, indent=2, allow_nan=False) + "\n")
    write_text(folder / PLAN_MD, plan_markdown(document))
    panels = []
    for variant_plan in result.variants:
        points = pareto_points(all_evaluations(variant_plan))
        panels.append((variant_plan.variant.name, points, pareto_front(points)))
    arms: list[str] = []  # every variant's arms, in order (a what-if may rename or add one)
    for variant_plan in result.variants:
        arms += [a.name for a in variant_plan.variant.exp.policies if a.name not in arms]
    with naming(folder / PARETO_PNG):
        png = draw_pareto(panels, arms, folder / PARETO_PNG)
    write_plan_report(folder, document, png)
