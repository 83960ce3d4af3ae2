"""The plan's report.html: the answer first (a paragraph and one figure), then the evidence.

Built from plan.json's document alone, so the page and plan.md never disagree and
`batchsim report FOLDER` rebuilds it: the verdict (apps/plan/answer_text.py), the ranked
configurations (ranking_plot.py), then the answers of every variant, the bisections' p99
against the load (bisection_plot.py), every ranking with the reasons shared by many rows
said once, and the Pareto fronts. The images are embedded, so the page stands alone.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from html import escape
from typing import Any

from batchsim.apps.plan.answer_text import plan_answer
from batchsim.apps.plan.bisection_plot import draw_bisections
from batchsim.apps.plan.html_tables import TABLE_CSS, table_html
from batchsim.apps.plan.pareto_plot import draw_pareto
from batchsim.apps.plan.ranking_plot import draw_ranking
from batchsim.apps.plan.tables import (
    TextTable,
    cheapest_table,
    fleets_table,
    front_table,
    max_rate_detail_table,
    max_rate_table,
    ranked_table,
)
from batchsim.apps.plan.verdict import judged_on
from batchsim.apps.report.page import html_document

_RANKING_CAPTION = ("What each configuration costs, best first: those that meet the SLO in "
                    "their arm's colour with their judged p99s, those that miss in grey with "
                    "what they missed. Every candidate is in the tables below.")

_PAGE_CSS = """
section#verdict { background: #f3f7fb; border-left: 4px solid #0072B2; padding: 0 1em;
       margin: 0.6em 0; }
section#verdict h2 { margin-top: 0.6em; }
section#verdict p.answer { font-size: 1.08em; }
section#verdict ul { margin-top: 0; }
h3 { font-size: 1.02em; margin: 1.2em 0 0.3em; }
"""


@dataclass(frozen=True, slots=True)
class PlanFigures:
    """The page's PNGs (None where the plan has nothing to draw); pareto is also a file."""

    ranking: bytes | None
    bisections: bytes | None
    pareto: bytes


def draw_plan_figures(document: dict[str, Any]) -> PlanFigures:
    return PlanFigures(draw_ranking(document), draw_bisections(document),
                       draw_pareto(document))


def _image(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f"<img src=\"data:image/png;base64,{data}\" alt=\"{escape(alt)}\">"


def _verdict_section(document: dict[str, Any], ranking: bytes | None) -> str:
    """The answer in words, the first sentence (the answer itself) in bold, and the ranked
    configurations' figure beneath: the first screen of the page."""
    answer = plan_answer(document)
    first, *rest = answer.sentences or [""]
    what_ifs = "".join(f"<li>{escape(line)}</li>" for line in answer.what_ifs)
    figure = ("" if ranking is None else
              f"{_image(ranking, 'Ranked configurations')}<p class=\"caption\">"
              f"{escape(_RANKING_CAPTION)}</p>")
    return ("<section id=\"verdict\"><h2>Answer</h2>"
            f"<p class=\"answer\"><strong>{escape(first)}</strong> "
            f"{escape(' '.join(rest))}</p>"
            + (f"<p>What-ifs, the whole plan again with one change:</p><ul>{what_ifs}</ul>"
               if what_ifs else "")
            + f"</section>{figure}")


def _rule(document: dict[str, Any]) -> str:
    return (f"Each configuration is {judged_on(document['replications'])}, rejected requests "
            "counting as misses, and must keep up with its load (no growing queue). plan.json "
            "in this folder has every run.")


def _figure_section(section_id: str, title: str, caption: str, png: bytes | None) -> list[str]:
    if png is None:
        return []
    return [f"<section id=\"{section_id}\"><h2>{escape(title)}</h2>"
            f"<p class=\"caption\">{escape(caption)}</p>{_image(png, title)}</section>"]


def _tables(tables: list[TextTable | None], prefix: str) -> list[str]:
    present = [t for t in tables if t is not None]
    return [table_html(t, f"{prefix}-{i}") for i, t in enumerate(present)]


def _evidence(document: dict[str, Any], figures: PlanFigures) -> list[str]:
    variants = document["variants"]
    body = ["<h2 id=\"evidence\">The evidence</h2>",
            f"<p class=\"context\">{escape(_rule(document))}</p>",
            *_tables([cheapest_table(document), max_rate_table(document)], "answers")]
    body += _figure_section(
        "bisection", "Max rate: the bisections' p99 against the load",
        "Each load a bisection tried, per arm: filled where the run met the SLO, hollow where "
        "it missed (a miss with p99s under the targets is a growing queue). The dashed line "
        "is the target; the answer is the highest filled point below the first hollow one.",
        figures.bisections)
    body += _tables([max_rate_detail_table(v) for v in variants if v["max_rate"]], "max-rate")
    body += _tables([ranked_table(v) for v in variants if v["candidates"]], "ranked")
    body += _tables([fleets_table(v) for v in variants if v.get("autoscaling")], "fleets")
    body += _figure_section(
        "pareto", "Pareto front: output tokens/s per GPU against per user",
        "Every configuration that met the SLO, per variant; the line joins those no other "
        "beats on both axes, each labelled (\"arm @ load\" is a bisection step on the file's "
        "deployment).", figures.pareto)
    body += _tables([front_table(v) for v in variants if v["max_rate"] or v["candidates"]],
                    "front")
    return body


def _footer(document: dict[str, Any]) -> str:
    used = ", ".join(f"{k} {v}" for k, v in (document.get("versions") or {}).items())
    return ("<footer>Built from plan.json in this folder; rebuild with <code>batchsim report "
            f"FOLDER</code>. The front is also pareto.png. Simulated with {escape(used)}."
            "</footer>")


def render_plan_page(document: dict[str, Any], figures: PlanFigures) -> str:
    name = str(document["config"]["name"])
    body = [f"<h1>Capacity plan: {escape(name)}</h1>",
            _verdict_section(document, figures.ranking), *_evidence(document, figures)]
    body.append(_footer(document))
    return html_document(f"plan: {name}", body, TABLE_CSS + _PAGE_CSS)
