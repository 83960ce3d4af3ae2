"""The page renders in headless Chromium (scripts/render_report.sh), images and all.

Slow and optional: it needs a Chromium on PATH (`apt-get install chromium-headless-shell`) and
is skipped without one. To judge readability, open the screenshot it leaves in pytest's tmp
folder, or run the script on any results folder.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from batchsim.apps.report.build import write_report
from tests.report.synthetic import write_folder

REPO = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not any(shutil.which(b) for b in BROWSERS), reason="no headless Chromium")
def test_the_report_renders_as_a_full_page(tmp_path: Path) -> None:
    page = write_report(write_folder(tmp_path / "results", {"static": 0, "continuous": 20}))
    shot = tmp_path / "report.png"
    subprocess.run([str(REPO / "scripts" / "render_report.sh"), str(page), str(shot)],
                   check=True, timeout=120)
    pixels = imread(shot)
    assert pixels.shape[1] == 1200
    ink = (pixels[..., :3] < 0.9).any(axis=-1)  # anything darker than near-white
    rows_with_ink = np.flatnonzero(ink.any(axis=1))
    assert ink.mean() > 0.03, "the page is blank"
    # the three plots sit below the table: ink reaches far down the page
    assert rows_with_ink.max() > 2000, rows_with_ink.max()


@pytest.mark.skipif(not any(shutil.which(b) for b in BROWSERS), reason="no headless Chromium")
def test_the_collapse_sweep_report_renders_every_curve(tmp_path: Path) -> None:
    """A reduced run of the shipped collapse sweep: every curve plot on the rendered page."""
    from typer.testing import CliRunner

    from batchsim.apps.cli import app
    from batchsim.apps.report.sweep_plots import SWEEP_PLOTS

    out = tmp_path / "collapse"
    result = CliRunner().invoke(app, [
        "sweep", str(REPO / "experiments" / "collapse.yaml"), "--set", "sweep=null",
        "--set", "workload.num_requests=300", "--param",
        "workload.arrivals.concurrency=16,48,64,128", "--replications", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text(encoding="utf-8")
    for spec in SWEEP_PLOTS:
        assert f'<section id="{spec.name}">' in page and (out / "plots" / f"{spec.name}.png"
                                                          ).is_file(), spec.name
    assert page.count('<img src="data:image/png;base64,') == len(SWEEP_PLOTS)
    assert '<span class="knee">knee</span>' in page
    shot = tmp_path / "report.png"
    subprocess.run([str(REPO / "scripts" / "render_report.sh"), str(out / "report.html"),
                    str(shot), "5200"], check=True, timeout=120)
    ink = (imread(shot)[..., :3] < 0.9).any(axis=-1)
    assert ink.mean() > 0.03, "the page is blank"
    assert np.flatnonzero(ink.any(axis=1)).max() > 4000  # five figures, then the table
