"""A sweep writes report.html and plots/ (the curves and the per-point table) through the CLI;
`batchsim report DIR` on the sweep folder rebuilds the same bytes."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app

runner = CliRunner()
SWEEP_PLOTS = ("sweep_throughput", "sweep_ttft", "sweep_tpot", "sweep_preemptions", "sweep_kv")
EMBEDDED = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')

# A closed loop on a small KV cache: recompute preempts as users are added, reserve does not.
EXPERIMENT: dict[str, Any] = {
    "name": "tiny-sweep-report", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "max_model_len": 2048, "kv_cache": {"num_blocks": 200},
    "workload": {"arrivals": {"kind": "closed_loop", "concurrency": 4},
                 "prompt_tokens": {"kind": "uniform", "low": 64, "high": 256},
                 "output_tokens": {"kind": "uniform", "low": 32, "high": 256},
                 "num_requests": 60},
    "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05},
    "policies": [{"name": "recompute", "kind": "continuous", "preemption": "recompute"},
                 {"name": "reserve", "kind": "continuous",
                  "admission_reserve": {"new_token_ratio": 0.7}}],
}


def _write(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, **extra}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("sweep")
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(_write(tmp_path)), "--param",
                                 "workload.arrivals.concurrency=2,8,32", "--replications", "2",
                                 "--jobs", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out / 'report.html'}" in result.output
    return out


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in EMBEDDED.findall(page)]


def test_the_sweep_report_embeds_one_image_per_curve_plot(sweep_dir: Path) -> None:
    page = (sweep_dir / "report.html").read_text(encoding="utf-8")
    pngs = [(sweep_dir / "plots" / f"{name}.png").read_bytes() for name in SWEEP_PLOTS]
    assert _images(page) == pngs  # exactly the PNGs beside the page, in page order
    assert sorted(p.name for p in (sweep_dir / "plots").iterdir()) == sorted(
        f"{name}.png" for name in SWEEP_PLOTS)
    assert all(png.startswith(b"\x89PNG") for png in pngs)
    for name in SWEEP_PLOTS:
        section = page[page.index(f'<section id="{name}">'):]
        section = section[:section.index("</section>")]
        assert section.count("<img ") == 1, name
        notes = re.findall(r'<p class="note">(.*?)</p>', section)
        # every curve had its data; a far SLO target is written out, not drawn
        assert all(note.endswith("above every value (not drawn)") for note in notes), name
    for title in ("Throughput and goodput vs load", "Time to first token vs load",
                  "Time per output token vs load", "Preemptions and recomputation vs load",
                  "KV-cache use and batch size vs load"):
        assert f"<h2>{title}</h2>" in page, title


def test_the_table_has_a_row_per_point_and_arm_with_half_widths(sweep_dir: Path) -> None:
    page = (sweep_dir / "report.html").read_text(encoding="utf-8")
    table = page[page.index('<table class="sweep">'):page.index("</table>")]
    assert table.count("<tr") == 1 + 3 * 2  # heading, then 3 points × 2 arms
    assert table.count('rowspan="2"') == 3  # each point's value once, over its two arms
    for label in ("output tok/s", "goodput req/s", "TTFT p99", "TPOT p99",
                  "preemptions / 1k req", "KV use mean"):
        assert f'<th scope="col">{label}</th>' in table, label
    assert table.count('<span class="ci">± ') == 3 * 2 * table.count('<th scope="col">')
    assert "workload.arrivals.concurrency: 2, 8, 32 (3 values)" in page
    assert "2 replications per point" in page


def test_report_command_rebuilds_the_sweep_report_byte_for_byte(sweep_dir: Path,
                                                                tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(sweep_dir, copy)
    shutil.rmtree(copy / "plots")
    (copy / "report.html").unlink()
    result = runner.invoke(app, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    assert (copy / "report.html").read_bytes() == (sweep_dir / "report.html").read_bytes()
    for name in SWEEP_PLOTS:
        png = f"plots/{name}.png"
        assert (copy / png).read_bytes() == (sweep_dir / png).read_bytes(), png


def test_run_of_a_file_with_a_sweep_and_one_replication_writes_the_report(
        tmp_path: Path) -> None:
    """No ci95 with one replication: curves without bands, a table without ±."""
    sweep = {"parameter": "workload.arrivals.concurrency", "values": [2, 8]}
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(_write(tmp_path, sweep=sweep)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text(encoding="utf-8")
    # a tiny load preempts nothing: that figure is one sentence
    assert len(_images(page)) == len(SWEEP_PLOTS) - 1
    assert '<span class="ci">' not in page
    assert "1 replication per point: no intervals" in page
    notes = re.findall(r'<p class="note">(.*?)</p>', page)
    assert "preemptions and recomputed tokens: zero at every point for every arm" in notes
    assert all(note.endswith(("(not drawn)", "every arm")) for note in notes), notes
