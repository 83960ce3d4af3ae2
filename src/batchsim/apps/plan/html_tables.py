"""The plan's tables as HTML, through pandas' Styler: the cells escaped, numbers right-aligned,
each verdict cell classed by its outcome (the page's CSS colours them), and the notes a table
carries (reasons shared by many rows) said once beneath it.

Styler names its table by a uuid, random unless given: each table gets one from its place on
the page, so the same document gives the same bytes.
"""

from __future__ import annotations

from html import escape

import pandas as pd
from pandas.io.formats.style import Styler

from batchsim.apps.plan.tables import TextTable

_TEXT_COLUMNS = {"arm", "variant", "configuration", "verdict"}

TABLE_CSS = """
table.plan { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 0.4em 0; }
table.plan th, table.plan td { padding: 0.25em 0.7em; border-bottom: 1px solid #eee;
       text-align: left; vertical-align: top; }
table.plan thead th { border-bottom: 2px solid #999; white-space: nowrap; }
table.plan td { white-space: nowrap; }
table.plan td.meets, table.plan td.misses { white-space: normal; min-width: 28em; }
table.plan th.num, table.plan td.num { text-align: right; white-space: nowrap; }
table.plan td.meets { color: #1a7f37; font-weight: 600; }
table.plan td.misses { color: #8a4b00; }
table.plan tbody tr:hover { background: #f6f8fa; }
p.table-note { color: #555; font-size: 0.92em; margin: 0.2em 0 0.8em; }
"""


def _cell_class(header: str, cell: str) -> str:
    if header == "verdict":
        return "meets" if cell == "meets" else "misses"
    return "" if header in _TEXT_COLUMNS else "num"


def table_html(table: TextTable, table_id: str) -> str:
    """TABLE as a titled section: a Styler table with id `T_<table_id>`, then its notes."""
    frame = pd.DataFrame(table.rows, columns=table.headers, dtype=object)
    classes = pd.DataFrame([[_cell_class(h, c) for h, c in zip(table.headers, row, strict=True)]
                            for row in table.rows], columns=table.headers, dtype=object)
    numeric = [i for i, header in enumerate(table.headers) if header not in _TEXT_COLUMNS]
    styler = (Styler(frame, uuid=table_id, cell_ids=False)
              .hide(axis="index")
              .format(escape="html")
              .format_index(escape="html", axis=1)
              .set_td_classes(classes)
              .set_table_attributes('class="plan"')
              .set_table_styles([{"selector": f"th.col{i}", "props": "text-align: right"}
                                 for i in numeric]))
    notes = "".join(f"<p class=\"table-note\">{escape(note)}</p>" for note in table.notes)
    return (f"<section class=\"plan-table\"><h3>{escape(table.title)}</h3>\n"
            f"{styler.to_html()}{notes}</section>")
