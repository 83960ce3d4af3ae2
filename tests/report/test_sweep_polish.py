"""Sweep report defects, each checked on a hand-written sweep: all-zero panels, identical
panel rows of a grid, titles wider than their panel, overlapping bar numbers, the highest load
meeting the SLO (page and console), each arm's GPUs."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console

from batchsim.apps.report.figures import NoPlot
from batchsim.apps.report.latency_plots import draw_percentiles
from batchsim.apps.report.results import load_results
from batchsim.apps.report.style import report_style
from batchsim.apps.report.sweep_page import render_sweep_page
from batchsim.apps.report.sweep_plots import SWEEP_PREEMPTIONS, SWEEP_THROUGHPUT, SWEEP_TPOT
from batchsim.apps.report.sweep_table import COLUMNS, cell_text, knees
from tests.report.html_grid import table_text
from tests.report.synthetic import write_folder
from tests.report.test_sweep_curves import RATE, _rates, _results, write_sweep

TTFT_TARGET = 0.5  # write_sweep's slo.ttft_p99_s; its TTFT p99 is 0.05 × rate, ±10%


def _zero(*keys: str) -> Any:
    def edit(row: dict[str, Any]) -> None:
        for key in keys:
            row["metrics"][key] = 0.0
            if row["ci95"] is not None:
                row["ci95"][key] = [0.0, 0.0]
    return edit


def _draw(spec: Any, folder: Path) -> Any:
    with report_style():
        return spec.draw(_results(folder))


def test_a_metric_zero_throughout_gets_a_sentence_not_a_panel(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "s", _rates(2, 8, 32), edit=_zero("recomputed_token_fraction"))
    drawing = _draw(SWEEP_PREEMPTIONS, folder)
    assert [axis.get_title() for axis in drawing.figure.axes] == ["preemptions"]
    assert "recomputed tokens: zero at every point for every arm" in drawing.notes


def test_a_figure_of_zeros_only_is_one_sentence(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "s", _rates(2, 8, 32), edit=_zero(
        "recomputed_token_fraction", "preemptions_per_1000_requests"))
    with pytest.raises(NoPlot, match="preemptions and recomputed tokens: zero at every point"):
        _draw(SWEEP_PREEMPTIONS, folder)


def _grid(second: str, values: list[Any]) -> list[dict[str, Any]]:
    return [{RATE: rate, second: value} for rate in (2, 8, 32) for value in values]


def test_a_grid_axis_that_changes_nothing_draws_each_panel_once(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "s", _grid("max_model_len", [2048, 4096]))
    drawing = _draw(SWEEP_THROUGHPUT, folder)
    titles = [axis.get_title() for axis in drawing.figure.axes]
    assert titles == ["max_model_len=2048 or 4096: output throughput",
                      "max_model_len=2048 or 4096: goodput"]
    assert "max_model_len=2048 or 4096: identical results, drawn once" in drawing.notes


def test_a_grid_axis_that_changes_the_results_keeps_its_rows(tmp_path: Path) -> None:
    def edit(row: dict[str, Any]) -> None:
        row["metrics"]["output_throughput_tps"] *= row["point"]["max_model_len"] / 2048

    folder = write_sweep(tmp_path / "s", _grid("max_model_len", [2048, 4096]), edit=edit)
    titles = [axis.get_title() for axis in _draw(SWEEP_THROUGHPUT, folder).figure.axes]
    assert titles[0] == "max_model_len=2048: output throughput"
    assert titles[2] == "max_model_len=4096: output throughput"


def test_long_titles_stay_inside_their_panels(tmp_path: Path) -> None:
    """Long group labels wrap, and a far SLO target is a note, not more title."""
    key = "policies.continuous.max_num_batched_tokens"

    def edit(row: dict[str, Any]) -> None:  # every group its own numbers: no merging
        row["metrics"]["tpot_s"]["p99"] *= 1 + row["point"][key] / 1e6
        row["metrics"]["tpot_s"]["p99"] /= 10  # far below the 50 ms target

    points = [{RATE: rate, key: tokens, "kv_cache.num_blocks": 123456}
              for rate in (2, 8, 32) for tokens in (8192, 16384)]
    folder = write_sweep(tmp_path / "s", points, edit=edit)
    drawing = _draw(SWEEP_TPOT, folder)
    figure: Figure = drawing.figure
    renderer = FigureCanvasAgg(figure).get_renderer()
    boxes = []
    for axis in figure.axes:
        panel, title = axis.get_window_extent(renderer), axis.title.get_window_extent(renderer)
        assert panel.x0 - 1 <= title.x0 and title.x1 <= panel.x1 + 1, axis.get_title()
        assert title.y1 <= figure.bbox.y1
        boxes.append(title)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert any("SLO target 50 ms: above every value (not drawn)" in n for n in drawing.notes)


def test_bar_numbers_of_three_arms_do_not_overlap(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "r", {"a": 0, "b": 0, "c": 0})
    with report_style():
        figure = draw_percentiles(load_results(folder)).figure
    renderer = FigureCanvasAgg(figure).get_renderer()
    for axis in figure.axes:
        labels = [text.get_window_extent(renderer) for text in axis.texts if text.get_text()]
        assert len(labels) == 12  # 3 arms × 4 percentiles
        assert not any(a.overlaps(b) for i, a in enumerate(labels) for b in labels[i + 1:])
        panel = axis.get_window_extent(renderer)
        assert all(box.y1 <= panel.y1 + 1 for box in labels)


def _page(folder: Path) -> str:
    """The sweep page without its figures (drawing them is what takes time)."""
    return render_sweep_page(_results(folder), [])


def _glance(page: str) -> list[str]:
    part = page[page.index("<h2>At a glance</h2>"):]
    return [unescape(item) for item in re.findall(r"<li>(.*?)</li>", part[:part.index("</ul>")])]


def _highest_meeting(folder: Path, arm: str, judged: int) -> float:
    """From the summary itself: the largest rate whose judged TTFT and TPOT p99 meet the
    targets (index 1: the interval's upper end; -1: the mean with one replication)."""
    summary = json.loads((folder / "summary.json").read_text())
    slo = summary["config"]["slo"]
    meeting = []
    for row in summary["rows"]:
        source = row["ci95"] if judged == 1 else row["metrics"]
        values = [source[k]["p99"] for k in ("ttft_s", "tpot_s")]
        if judged == 1:
            values = [v[1] for v in values]
        if row["arm"] == arm and values[0] <= slo["ttft_p99_s"] and values[1] <= slo[
                "tpot_p99_s"]:
            meeting.append(row["point"][RATE])
    return max(meeting)


@pytest.mark.parametrize(("replications", "judged"), [(3, 1), (1, -1)])
def test_at_a_glance_names_the_highest_load_meeting_the_slo(tmp_path: Path, replications: int,
                                                            judged: int) -> None:
    """With replications the p99's upper bound is judged (0.055 × 10 misses 0.5), with one
    the mean (0.05 × 10 meets it)."""
    folder = write_sweep(tmp_path / "s", _rates(2, 4, 8, 10, 12, 16), replications=replications)
    page = _page(folder)
    highest = _highest_meeting(folder, "a", judged)
    assert highest == (8 if replications > 1 else 10)
    following = {8: 10, 10: 12}[int(highest)]
    assert (f"a: highest rate meeting the SLO: {highest:g}; at rate={following} it misses TTFT"
            in _glance(page))


def test_rejections_above_one_percent_miss_the_slo(tmp_path: Path) -> None:
    def edit(row: dict[str, Any]) -> None:
        if row["point"][RATE] == 4:
            row["metrics"].update(rejected=2, measured_requests=100)

    folder = write_sweep(tmp_path / "s", _rates(2, 4, 8, 16), edit=edit)
    lines = _glance(_page(folder))
    assert ("a: highest rate meeting the SLO: 8; at rate=16 it misses TTFT — but it misses at "
            "rate=4") in lines


def test_the_console_names_the_highest_load_meeting_the_slo(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "s", _rates(2, 4, 8, 16, 32))
    from batchsim.apps.sweep.outputs import print_slo_reach  # new with the feature

    console = Console(record=True, width=200)
    print_slo_reach(folder, console)
    assert console.export_text().splitlines() == [
        "a: highest rate meeting the SLO: 8; at rate=16 it misses TTFT",
        "b: highest rate meeting the SLO: 8; at rate=16 it misses TTFT"]


def test_the_sweep_page_names_each_arms_gpus(tmp_path: Path) -> None:
    def edit(row: dict[str, Any]) -> None:
        row["metrics"]["gpus"] = 1.0 if row["arm"] == "a" else 4.0

    folder = write_sweep(tmp_path / "s", _rates(2, 8), edit=edit)
    summary = json.loads((folder / "summary.json").read_text())
    summary["config"].update(tensor_parallel=1, pipeline_parallel=1)
    (folder / "summary.json").write_text(json.dumps(summary))
    page = unescape(_page(folder))
    assert ("at the first point: The memory plan is one replica's (1 GPU); GPUs per arm: a 1, "
            "b 4.") in page


def test_the_sweep_table_cells_read_as_their_cell_text(tmp_path: Path) -> None:
    """Laid out by the template, each row shows the point's values once (spanning its arms),
    the arm, and `cell_text` of every column, user strings escaped exactly once."""
    folder = write_sweep(tmp_path / "s", _rates(2, 8, 32), arms=("a", "b <&> 'c'"))
    results = _results(folder)
    page = render_sweep_page(results, [])
    grid = table_text(page[page.index('<table class="sweep">'):])
    columns = [c for c in COLUMNS if not c.optional]
    assert grid[0] == ["rate", "arm", *(c.label for c in columns)]
    knee = {id(row) for row in results.rows} & knees(results)
    expected = []
    for index, row in enumerate(results.rows):
        values = [f"{row.point[RATE]:g}"] if index % 2 == 0 else []
        arm = row.arm + (" knee" if id(row) in knee else "")
        expected.append([*values, arm, *("".join(t for t in cell_text(row, c) if t)
                                         for c in columns)])
    assert grid[1:] == expected
