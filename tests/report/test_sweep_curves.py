"""Sweep curves from hand-written sweep summaries: missing metrics, the knee, the axes, grids."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from batchsim.apps.report.build import write_report
from batchsim.apps.report.sweep_plots import (
    SWEEP_PLOTS,
    SWEEP_PREEMPTIONS,
    SWEEP_THROUGHPUT,
    SWEEP_TPOT,
    SWEEP_TTFT,
)
from batchsim.apps.report.sweep_results import SweepResults, load_sweep

IMAGE = '<img src="data:image/png;base64,'
RATE = "workload.arrivals.rate"


def _metrics(load: float, arm_index: int) -> dict[str, Any]:
    """A throughput that saturates at 1,000 tok/s, latency that grows with the load."""
    throughput = min(100.0 * load, 1000.0) * (1 - 0.05 * arm_index)
    return {
        "output_throughput_tps": throughput, "request_throughput_rps": throughput / 100,
        "goodput_rps": throughput / 100 if load <= 10 else 1.0, "slo_attainment": 0.9,
        "ttft_s": {"p50": 0.02 * load, "p99": 0.05 * load},
        "tpot_s": {"p50": 0.008, "p99": 0.01 + 0.0001 * load},
        "preemptions_per_1000_requests": max(0.0, 50.0 * (load - 10)),
        "recomputed_token_fraction": max(0.0, 0.01 * (load - 10)),
        "kv_utilization": {"mean": min(0.1 * load, 0.97), "max": min(0.12 * load, 1.0)},
        "mean_batch_size": min(load, 12.0), "rejected": 0, "completed": 100,
    }


def _interval(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _interval(value) for key, value in node.items()}
    return [node * 0.9, node * 1.1] if isinstance(node, float | int) else None


def write_sweep(folder: Path, points: list[dict[str, Any]], arms: tuple[str, ...] = ("a", "b"),
                replications: int = 3, edit: Any = None) -> Path:
    """A sweep folder's summary.json: one row per (point, arm), means and ±10% intervals.
    `edit(row)` may change a row's metrics before it is written."""
    rows = []
    for point in points:
        load = float(point.get(RATE, 5.0)) if isinstance(point.get(RATE, 5.0), int | float) else 5
        for index, arm in enumerate(arms):
            metrics = _metrics(load, index)
            row = {"arm": arm, "point": point, "folder": None, "replications": replications,
                   "metrics": metrics,
                   "ci95": _interval(metrics) if replications > 1 else None}
            if edit is not None:
                edit(row)
            rows.append(row)
    summary = {"config": {"name": "synthetic-sweep", "seed": 1,
                          "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05}},
               "versions": {"batchsim": "test"},
               "sweep": {"parameters": list(points[0]), "points": len(points),
                         "replications": replications, "seeds": list(range(replications))},
               "rows": rows}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return folder


def _rates(*values: float) -> list[dict[str, Any]]:
    return [{RATE: v} for v in values]


def _results(folder: Path) -> SweepResults:
    return load_sweep(folder, json.loads((folder / "summary.json").read_text()))


def _notes(page: str) -> list[str]:
    return re.findall(r'<p class="note">(.*?)</p>', page)


def test_an_arm_missing_a_metric_gets_a_note_not_a_crash(tmp_path: Path) -> None:
    def drop(row: dict[str, Any]) -> None:
        if row["arm"] == "b":
            for key in ("recomputed_token_fraction", "kv_utilization"):
                del row["metrics"][key], row["ci95"][key]

    folder = write_sweep(tmp_path / "s", _rates(2, 5, 10, 20), edit=drop)
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == len(SWEEP_PLOTS)
    notes = _notes(page)
    assert "recomputed tokens: b has no value at any point in summary.json" in notes
    assert "KV-cache use: b has no value at any point in summary.json" in notes
    assert "<td>–</td>" in page  # and the table says so in its cells


def test_a_value_missing_at_some_points_is_named(tmp_path: Path) -> None:
    def gap(row: dict[str, Any]) -> None:
        if row["arm"] == "a" and row["point"][RATE] == 20:
            row["metrics"]["ttft_s"]["p99"] = None

    page = write_report(write_sweep(tmp_path / "s", _rates(2, 5, 20), edit=gap)).read_text()
    assert page.count(IMAGE) == len(SWEEP_PLOTS)
    assert "TTFT p99: a has no value at rate=20 in summary.json" in _notes(page)


def test_a_metric_no_arm_has_costs_only_its_plot(tmp_path: Path) -> None:
    def drop(row: dict[str, Any]) -> None:
        for key in ("preemptions_per_1000_requests", "recomputed_token_fraction"):
            del row["metrics"][key]

    folder = write_sweep(tmp_path / "s", _rates(2, 5, 20), edit=drop)
    (folder / "plots").mkdir()
    (folder / "plots" / "sweep_preemptions.png").write_bytes(b"stale")
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == len(SWEEP_PLOTS) - 1
    assert ("summary.json has no preemptions_per_1000_requests or recomputed_token_fraction "
            "for any arm") in _notes(page)
    assert not (folder / "plots" / "sweep_preemptions.png").exists()


def test_the_knee_is_the_first_point_at_95_percent_of_the_peak(tmp_path: Path) -> None:
    # Throughput 100·rate up to 1,000 tok/s: 960 at rate 9.6 is within 5% of the peak.
    folder = write_sweep(tmp_path / "s", _rates(2, 5, 9.6, 12, 20), arms=("a",))
    results = _results(folder)
    (series,) = results.series({})
    knee = results.knee(series)
    assert knee is not None and knee.point[RATE] == 9.6
    page = write_report(folder).read_text(encoding="utf-8")
    assert "a: throughput levels off at rate=9.6 (960 output tok/s, peak 1,000 at rate=12)" \
        in page
    assert page.count('<span class="knee">knee</span>') == 1


@pytest.mark.parametrize("rates", [(2, 4, 6, 8), (2, 20), (20, 40, 80)])
def test_no_knee_while_throughput_still_climbs_or_with_two_points(tmp_path: Path,
                                                                 rates: tuple[float, ...]
                                                                 ) -> None:
    folder = write_sweep(tmp_path / "s", _rates(*rates), arms=("a",))
    results = _results(folder)
    (series,) = results.series({})
    if rates == (20, 40, 80):  # flat from the first point: the knee is the first point
        assert results.knee(series) is series.rows[0]
    else:
        assert results.knee(series) is None
        assert '<span class="knee">' not in write_report(folder).read_text(encoding="utf-8")


def test_x_turns_logarithmic_when_the_values_span_more_than_20x(tmp_path: Path) -> None:
    wide = SWEEP_THROUGHPUT.draw(_results(write_sweep(tmp_path / "w", _rates(1, 4, 16, 64))))
    narrow = SWEEP_THROUGHPUT.draw(_results(write_sweep(tmp_path / "n", _rates(8, 32, 128))))
    assert wide.figure.axes[0].get_xscale() == "log"
    assert narrow.figure.axes[0].get_xscale() == "linear"
    assert [t.get_text() for t in narrow.figure.axes[0].get_xticklabels()] == ["8", "32", "128"]
    assert "log scale" in wide.figure.axes[0].get_xlabel()


def test_slo_targets_are_dashed_on_the_p99_panels_only(tmp_path: Path) -> None:
    results = _results(write_sweep(tmp_path / "s", _rates(2, 5, 10, 20)))
    p50, p99 = SWEEP_TTFT.draw(results).figure.axes[:2]

    def horizontal(axis: Any) -> list[float]:
        return [line.get_ydata()[0] for line in axis.lines
                if len(set(line.get_ydata())) == 1 and line.get_linestyle() == "--"]

    assert horizontal(p99) == [0.5] and horizontal(p50) == []
    assert p99.get_yscale() == "log"  # 0.1 s to 1 s p99, 0.04 s p50 on one shared scale
    # TPOT p99 stays near 10 ms against a 50 ms target: written under the figure, not drawn
    # (in the panel's title it would run past the panel).
    tpot = SWEEP_TPOT.draw(results)
    assert horizontal(tpot.figure.axes[1]) == []
    assert "TPOT p99: SLO target 50 ms: above every value (not drawn)" in tpot.notes


def test_intervals_are_bands_with_replications_and_absent_without(tmp_path: Path) -> None:
    replicated = SWEEP_PREEMPTIONS.draw(_results(write_sweep(tmp_path / "r", _rates(5, 20))))
    single = SWEEP_PREEMPTIONS.draw(_results(write_sweep(tmp_path / "s", _rates(5, 20),
                                                         replications=1)))
    assert replicated.figure.axes[0].collections  # fill_between
    assert not single.figure.axes[0].collections
    one_point = SWEEP_PREEMPTIONS.draw(_results(write_sweep(tmp_path / "p", _rates(20))))
    assert one_point.figure.axes[0].containers  # a band needs two points: error bars


def test_a_grid_draws_one_panel_row_per_value_of_the_second_parameter(tmp_path: Path) -> None:
    seqs = "policies.a.max_num_seqs"
    points = [{RATE: r, seqs: s} for r in (2, 5, 20) for s in (64, 256)]

    def edit(row: dict[str, Any]) -> None:  # the second parameter changes the results
        row["metrics"]["output_throughput_tps"] *= row["point"][seqs] / 64

    folder = write_sweep(tmp_path / "g", points, edit=edit)
    drawing = SWEEP_THROUGHPUT.draw(_results(folder))
    titles = [axis.get_title().replace("\n", " ") for axis in drawing.figure.axes]
    assert titles == ["max_num_seqs=64: output throughput", "max_num_seqs=64: goodput",
                      "max_num_seqs=256: output throughput", "max_num_seqs=256: goodput"]
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == len(SWEEP_PLOTS)
    assert f'<th class="key" scope="col" title="{seqs}">max_num_seqs</th>' in page


def test_swept_labels_are_categories(tmp_path: Path) -> None:
    points = [{"dtype.kv_cache": kind} for kind in ("bf16", "fp8", "int8")]
    folder = write_sweep(tmp_path / "c", points)
    drawing = SWEEP_THROUGHPUT.draw(_results(folder))
    assert [t.get_text() for t in drawing.figure.axes[0].get_xticklabels()] == [
        "bf16", "fp8", "int8"]
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == len(SWEEP_PLOTS) - 1  # no preemptions at this load: a note
    assert "preemptions and recomputed tokens: zero at every point for every arm" in _notes(page)


def test_replications_without_a_swept_parameter_give_the_table_only(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "r", [{}])
    page = write_report(folder).read_text(encoding="utf-8")
    assert IMAGE not in page
    assert "this sweep has no swept parameter (replications only): its one point is in the " \
        "table" in _notes(page)
    assert page.count('<span class="ci">') > 0
