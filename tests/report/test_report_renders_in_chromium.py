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

from batchsim.report.build import write_report
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
