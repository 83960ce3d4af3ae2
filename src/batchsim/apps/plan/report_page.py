"""The plan's report.html: its answers as tables and the Pareto front, in one page.

Built from what the plan already wrote (plan.json's tables and pareto.png), so the page and
plan.md never disagree; the image is embedded, so the page stands alone.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from batchsim.apps.plan.tables import TextTable, all_tables
from batchsim.apps.plan.verdict import judged_on
from batchsim.apps.report.page import html_document
from batchsim.experiment.output_folder import write_text

REPORT_HTML = "report.html"


def _table_html(table: TextTable) -> str:
    head = "".join(f"<th>{escape(cell)}</th>" for cell in table.headers)
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>"
                   for row in table.rows)
    return (f"<section><h2>{escape(table.title)}</h2>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>")


def _pareto_html(png: Path) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return ("<section id=\"pareto\"><h2>Pareto front: output tokens/s per GPU vs per user</h2>"
            "<p class=\"caption\">Every configuration that was run, per variant; the front "
            "joins those no other beats on both axes (more throughput per GPU and per user)."
            f"</p><img src=\"data:image/png;base64,{data}\" alt=\"Pareto front\"></section>")


def write_plan_report(out_dir: Path, document: dict[str, Any], pareto_png: Path) -> Path:
    slo = ", ".join(f"{key} ≤ {value:g}" for key, value in document["slo"].items()
                    if value is not None)
    intro = (f"<h1>Capacity plan: {escape(document['config']['name'])}</h1>"
             f"<p>SLO: {escape(slo)}, {escape(judged_on(document['replications']))}, "
             "rejected requests counting as misses; "
             "every run must also keep up with its load. plan.json in this folder has every "
             "run.</p>")
    body = [intro, *(_table_html(t) for t in all_tables(document)), _pareto_html(pareto_png)]
    path = out_dir / REPORT_HTML
    write_text(path, html_document(f"plan: {document['config']['name']}", body))
    return path
