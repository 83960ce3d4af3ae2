"""`batchsim report DIR`: redraw a results folder's report.html and plots/ where they are.

As `batchsim run` writes them (experiment/output_folder.py): under the folder's lock, so it is
refused while a run or a sweep writes the folder (or another report redraws it), and drawn
in a staging folder that is moved in whole — plots/ in one rename, report.html last — so a
reader never sees a half-written page, or a page beside another page's plots.
"""

from __future__ import annotations

from pathlib import Path

from batchsim.apps.report.build import REPORT_FILE, write_report
from batchsim.apps.report.results import read_summary
from batchsim.experiment.output_folder import check_writable, written_atomically


def rebuild_report(folder: Path) -> Path:
    """Redraw FOLDER's report from the files in it; returns the page's path. A write failure
    is one `OutputWriteError` and leaves the previous report as it was."""
    # What would fail anyway fails first, in one line, with no lock file made for it: a folder
    # that holds no results, or one the page cannot be written into.
    read_summary(folder)
    check_writable(folder, (REPORT_FILE,))
    with written_atomically(folder, marker=REPORT_FILE) as staging:
        write_report(folder, into=staging)  # read again under the lock: what is there now
    return folder / REPORT_FILE
