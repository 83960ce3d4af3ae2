"""What a plan writes: plan.json (everything), plan.md (the answer and the tables),
pareto.png, and report.html (the answer, then the evidence, in one page); all at once,
plan.json last. pareto.png and report.html are drawn from plan.json alone, which is how
`batchsim report` redraws them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batchsim.apps.plan.answer_text import plan_answer, slo_text
from batchsim.apps.plan.tables import TextTable, all_tables
from batchsim.apps.plan.verdict import judged_on
from batchsim.experiment.output_folder import naming, write_text, written_atomically

PLAN_JSON, PLAN_MD, PARETO_PNG = "plan.json", "plan.md", "pareto.png"
REPORT_HTML = "report.html"
PLAN_FILES = (PLAN_JSON, PLAN_MD, PARETO_PNG, REPORT_HTML)


def markdown_table(table: TextTable) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    notes = ["", *table.notes] if table.notes else []
    return "\n".join([f"### {table.title}", "", line(table.headers),
                      line(["---"] * len(table.headers)), *(line(row) for row in table.rows),
                      *notes])


def plan_markdown(document: dict[str, Any]) -> str:
    answer = plan_answer(document)
    head = [f"# Capacity plan: {document['config']['name']}", "", answer.headline, "",
            *(f"- {line}" for line in answer.what_ifs), *([""] if answer.what_ifs else []),
            f"SLO: {slo_text(document['slo'])} (p99 over the measured requests, rejected "
            f"requests counting as misses; {judged_on(document['replications'])} — the p99 "
            "columns show the judged value). Every run must also keep up with its load (no "
            "growing queue). Other numbers are means over replications; `plan.json` has every "
            "run, `report.html` the figures.", "",
            f"![Pareto front]({PARETO_PNG})", "", ""]
    return "\n".join(head) + "\n\n".join(markdown_table(t) for t in all_tables(document)) + "\n"


def write_plan(out_dir: Path, document: dict[str, Any]) -> list[Path]:
    """The plan's own files as one step (`written_atomically`): staged and moved in beside its
    run folders with plan.json last — the plan's marker: a folder holding plan.json holds the
    whole plan. A write failure is one `OutputWriteError` that leaves the previous plan's files
    (or none) and every complete run folder, for the same command to read back."""
    with written_atomically(out_dir, marker=PLAN_JSON) as staging:
        _write_plan_files(staging, document)
    return [out_dir / name for name in PLAN_FILES]


def _write_plan_files(folder: Path, document: dict[str, Any]) -> None:
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    write_text(folder / PLAN_JSON, text)
    write_text(folder / PLAN_MD, plan_markdown(document))
    # Drawn from plan.json as read back, not from the document in memory, so a rebuild from
    # the file cannot differ by a tuple or an integer-valued float.
    write_plan_pages(folder, json.loads(text))


def write_plan_pages(folder: Path, document: dict[str, Any]) -> None:
    """pareto.png and report.html, from plan.json's document alone."""
    from batchsim.apps.plan.report_page import (  # matplotlib only when drawing
        draw_plan_figures,
        render_plan_page,
    )

    figures = draw_plan_figures(document)
    with naming(folder / PARETO_PNG):
        (folder / PARETO_PNG).write_bytes(figures.pareto)
    write_text(folder / REPORT_HTML, render_plan_page(document, figures))
