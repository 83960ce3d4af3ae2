"""`batchsim report DIR` for a plan's folder: redraw pareto.png and report.html from plan.json.

As `batchsim plan` draws them (apps/plan/outputs.py `write_plan_pages`), so a rebuild gives
the bytes the plan wrote; under the folder's lock, staged and moved in with report.html last,
as apps/report/rebuild.py does for a run's folder. The dispatch lives in the command
(apps/cli.py), since apps/plan already draws with apps/report and the two may not import each
other both ways.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batchsim.apps.plan.outputs import PARETO_PNG, PLAN_JSON, REPORT_HTML, write_plan_pages
from batchsim.apps.report.results import ReportError
from batchsim.experiment.output_folder import check_writable, written_atomically


def is_plan_folder(folder: Path) -> bool:
    """A folder `batchsim plan` wrote: it holds plan.json, the plan's marker."""
    return (folder / PLAN_JSON).is_file()


def read_plan(folder: Path) -> dict[str, Any]:
    path = folder / PLAN_JSON
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path}: not a readable plan ({err})") from err
    if not isinstance(document, dict) or not isinstance(document.get("variants"), list):
        raise ReportError(f"{path}: not a plan written by `batchsim plan` (no variants)")
    return document


def rebuild_plan_report(folder: Path) -> Path:
    """Redraw FOLDER's pareto.png and report.html; returns the page's path."""
    read_plan(folder)  # what would fail anyway fails first, with no lock file made for it
    check_writable(folder, (PARETO_PNG, REPORT_HTML))
    with written_atomically(folder, marker=REPORT_HTML) as staging:
        write_plan_pages(staging, read_plan(folder))  # read again under the lock
    return folder / REPORT_HTML
