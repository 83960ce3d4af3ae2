"""The plan's report and console: the answer first, latencies in units a reader says, a reason
shared by many candidates said once, labelled figures drawn from plan.json, `batchsim report`
rebuilding a plan's folder to the bytes `plan` wrote, and a console of tens of lines.

One tiny plan (tests/plan/tiny.py, about 20 runs) is run once for the module."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.plan import bisection_plot, pareto_plot
from batchsim.apps.plan.durations import latency_text
from batchsim.apps.plan.evaluate import DOES_NOT_FIT, MEETS
from tests.plan.tiny import write_experiment

# TP3 does not divide Llama-3.1-8B's heads: both arms' TP3 candidates fail for one reason.
PLAN = {
    "rate": {"low": 2, "high": 34, "tolerance": 8},
    "target_rate": 20,
    "candidates": {"tensor_parallel": [1, 3], "replicas": [1, 2]},
    "price_per_gpu_hour": {"h100-sxm": 2.0},
}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the plan's folder, what `batchsim plan` printed)."""
    folder = tmp_path_factory.mktemp("plan")
    file = write_experiment(folder, PLAN)
    result = CliRunner().invoke(app, ["plan", str(file), "--out", str(folder / "out"),
                                      "--jobs", "1"])
    assert result.exit_code == 0, result.output
    return folder / "out", result.output


def _document(out: Path) -> dict[str, Any]:
    return json.loads((out / "plan.json").read_text("utf-8"))


def _page(out: Path) -> str:
    return (out / "report.html").read_text("utf-8")


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0073, "7.3 ms"), (0.0734, "73.4 ms"), (0.647, "647 ms"), (1.051, "1.05 s"),
    (2.0, "2 s"), (36.2, "36.2 s"), (59.999, "1 min"), (1548.0, "25.8 min"),
    (7200.0, "2 h"), (None, "-"), (float("inf"), "rejected"),
])
def test_latencies_read_in_the_unit_that_suits_them(seconds: float | None, text: str) -> None:
    assert latency_text(seconds) == text


def test_the_page_leads_with_the_verdict_and_one_figure(planned: tuple[Path, str]) -> None:
    out, _ = planned
    document, page = _document(out), _page(out)
    body = page.split("<body>", 1)[1]
    best = document["variants"][0]["candidates"]["ranked"][0]
    assert best["status"] == MEETS
    first = body.split("</section>", 1)[0]
    assert body.index("<section") == body.index("<section id=\"verdict\">")
    # How many GPUs, which layout, at what cost, and the max rate: in the first section.
    for text in (best["label"], f"{best['gpus']} GPU", f"${best['usd_per_hour']:,.2f}/hour",
                 "per million output tokens", "Runner-up", "The largest load meeting the SLO"):
        assert text in first, text
    for entry in document["variants"][0]["max_rate"]:
        assert f"{entry['arm']} {entry['answer']:g} req/s" in first
    # Then the one figure, before any table.
    evidence = body.index("The evidence")
    assert body.index("<img", body.index("</section>")) < evidence < body.index("<table")


def test_no_latency_is_printed_as_thousands_of_milliseconds(planned: tuple[Path, str]) -> None:
    out, console = planned
    for text in (_page(out), (out / "plan.md").read_text("utf-8"), console):
        assert not re.search(r"\d,\d{3}(\.\d)? ms", text)
    # One static replica at 20 req/s falls behind by seconds: its TTFT reads in seconds.
    ranked = _document(out)["variants"][0]["candidates"]["ranked"]
    slow = max(r["p99"]["ttft_p99_s"]["judged"] for r in ranked if r["status"] != DOES_NOT_FIT)
    assert slow > 1.0 and f" >{latency_text(slow)}</td>" in _page(out)


def test_a_reason_shared_by_many_candidates_is_said_once(planned: tuple[Path, str]) -> None:
    out, _ = planned
    ranked = _document(out)["variants"][0]["candidates"]["ranked"]
    misfits = [row for row in ranked if row["status"] == DOES_NOT_FIT]
    reasons = {row["reasons"][0] for row in misfits}
    assert len(misfits) == 4 and len(reasons) == 1
    reason = reasons.pop()
    for text in (_page(out), (out / "plan.md").read_text("utf-8")):
        assert text.count(reason) == 1
        assert f"4 candidates do not fit ({', '.join(r['label'] for r in misfits)})" in text
        # The table ranks only what fits.
        assert f"| {misfits[0]['rank']} | {misfits[0]['label']} |" not in text


def test_report_rebuilds_a_plan_folder_byte_identically(planned: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    out, _ = planned
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("base"))
    wrote = {name: (copy / name).read_bytes() for name in ("report.html", "pareto.png")}
    for name in wrote:
        (copy / name).write_bytes(b"stale")
    result = CliRunner().invoke(app, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    assert "report.html" in result.output
    for name, data in wrote.items():
        assert (copy / name).read_bytes() == data, name


def test_report_of_a_broken_plan_json_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text("{not json", encoding="utf-8")
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "plan.json: not a readable plan" in result.stderr
    assert not (tmp_path / "report.html").exists()


def test_the_console_gives_the_answer_in_tens_of_lines(planned: tuple[Path, str]) -> None:
    out, console = planned
    document = _document(out)
    lines = console.splitlines()
    assert len(lines) <= 45, console
    assert lines[1].startswith("To serve 20 req/s") and "plan.md" in lines[-1]
    best = document["variants"][0]["candidates"]["ranked"][0]["label"]
    assert best in lines[1]
    # Only the best few candidates; not the per-variant detail or front tables.
    assert "Pareto front" not in console and "at the largest load" not in console


def _axes() -> Any:
    figure = Figure()
    FigureCanvasAgg(figure)
    return figure.subplots()


def test_the_front_is_labelled_in_readable_text(planned: tuple[Path, str]) -> None:
    out, _ = planned
    variant = _document(out)["variants"][0]
    ax = _axes()
    pareto_plot._panel(ax, variant, pareto_plot.pareto_arms(_document(out)))
    labels = [text.get_text() for text in ax.texts]
    front = variant["pareto"]["front"]
    assert len(labels) == len(front) >= 2
    assert labels[0] == front[0]["label"].replace(" h100-sxm", "")
    assert min(text.get_fontsize() for text in ax.texts) >= 10


def test_the_bisection_plot_draws_each_step_p99(planned: tuple[Path, str]) -> None:
    out, _ = planned
    document = _document(out)
    variant = document["variants"][0]
    ax = _axes()
    bisection_plot._panel(ax, variant, "ttft_p99_s", 1.0, ["vllm", "static"])
    lines = [line for line in ax.get_lines()  # an arm's line; not its dots, not the target
             if len(line.get_xdata()) > 1 and line.get_linestyle() == "-"]
    for line, entry in zip(lines, variant["max_rate"], strict=True):
        steps = sorted(entry["steps"], key=lambda s: s["load"])
        assert list(line.get_xdata()) == [s["load"] for s in steps]
        assert list(line.get_ydata()) == [s["p99"]["ttft_p99_s"]["judged"] for s in steps]
    assert bisection_plot.draw_bisections(document) is not None
