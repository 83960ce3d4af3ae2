"""`batchsim run` writes report.html and plots/; `batchsim report DIR` rebuilds the same bytes."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from tests.cli_checks import fails_cleanly as _fails_cleanly
from tests.report.html_grid import table_cells
from tests.validation.experiment_builder import base_experiment

runner = CliRunner()
PLOTS = ("latency_cdfs", "latency_percentiles", "timelines")
EMBEDDED = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _experiment(tmp_path: Path) -> Path:
    """Static vs continuous with a bounded queue: one arm keeps up, one rejects requests."""
    exp = base_experiment(
        name="report", warmup_s=1.0, slo={"ttft_p99_s": 0.5, "tpot_p99_s": 0.05},
        workload={"arrivals": {"kind": "poisson", "rate": 40.0},
                  "prompt_tokens": {"kind": "uniform", "low": 64, "high": 512},
                  "output_tokens": {"kind": "uniform", "low": 8, "high": 200},
                  "num_requests": 150},
        policies=[{"name": "static-8", "kind": "static", "max_batch_size": 8,
                   "max_output_tokens": 256},
                  {"name": "continuous-q4", "kind": "continuous", "max_num_seqs": 8,
                   "admission": {"max_queue": 4}}],
    )
    path = tmp_path / "report.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("run")
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(_experiment(tmp_path)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out / 'report.html'}" in result.output
    return out


def test_run_writes_the_report_with_one_embedded_image_per_plot(results_dir: Path) -> None:
    page = (results_dir / "report.html").read_text(encoding="utf-8")
    images = [base64.b64decode(data) for data in EMBEDDED.findall(page)]
    pngs = [(results_dir / "plots" / f"{name}.png").read_bytes() for name in PLOTS]
    assert images == pngs  # the page embeds exactly the PNGs saved beside it, in order
    assert sorted(p.name for p in (results_dir / "plots").iterdir()) == sorted(
        f"{name}.png" for name in PLOTS)
    assert all(png.startswith(b"\x89PNG") for png in pngs)


def test_the_table_has_a_column_per_arm_and_shows_rejections(results_dir: Path) -> None:
    page = (results_dir / "report.html").read_text(encoding="utf-8")
    head = page[page.index("<thead>"):page.index("</thead>")]
    assert ">static-8<" in head and ">continuous-q4<" in head
    rows = {row[0][2]: row[1:] for row in table_cells(page[page.index("<h2>Comparison"):])}
    (_, first_class, first), (_, second_class, second) = rows["rejected"]
    assert first == "0" and "alert" not in first_class.split()
    assert "queue_full" in second and "alert" in second_class.split()  # flagged for that arm
    assert "measured requests were rejected" in page  # and a note above the table
    for label in ("request throughput (req/s)", "TTFT p50 / p99", "goodput (req/s)",
                  "SLO attainment", "preemptions per 1,000 requests", "KV-cache use mean / max"):
        assert label in rows, label


def test_report_command_rebuilds_identical_bytes(results_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(results_dir, copy)
    shutil.rmtree(copy / "plots")
    (copy / "report.html").unlink()
    result = runner.invoke(app, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    assert (copy / "report.html").read_bytes() == (results_dir / "report.html").read_bytes()
    for name in PLOTS:
        png = f"plots/{name}.png"
        assert (copy / png).read_bytes() == (results_dir / png).read_bytes(), png


def test_a_folder_that_does_not_exist(tmp_path: Path) -> None:
    _fails_cleanly(["report", str(tmp_path / "nowhere")], "nowhere", "no such results folder")


def test_a_folder_without_a_summary(tmp_path: Path) -> None:
    _fails_cleanly(["report", str(tmp_path)], str(tmp_path), "no summary.json")


def test_a_summary_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{not json", encoding="utf-8")
    _fails_cleanly(["report", str(tmp_path)], "summary.json", "not valid JSON")


def test_a_summary_without_arms(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text('{"rows": []}', encoding="utf-8")
    _fails_cleanly(["report", str(tmp_path)], "summary.json", "rows")


def test_a_table_that_is_not_parquet(results_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(results_dir, copy)
    (copy / "requests.parquet").write_bytes(b"not parquet")
    _fails_cleanly(["report", str(copy)], "requests.parquet", "not a readable parquet table")
