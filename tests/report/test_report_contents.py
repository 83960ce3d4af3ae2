"""What the page shows when arms, files or columns are missing, and which rows the table has."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from batchsim.apps.report.build import write_report
from batchsim.apps.report.results import load_results
from batchsim.apps.report.table import comparison_table_html, duration, table_rows
from tests.report.html_grid import table_cells, table_text
from tests.report.synthetic import write_folder

IMAGE = '<img src="data:image/png;base64,'


def _notes(page: str) -> list[str]:
    return re.findall(r'<p class="note">(.*?)</p>', page)


def test_an_arm_that_finished_nothing_still_gets_its_column(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "r", {"served": 0, "all-rejected": 200})
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == 3
    assert ">all-rejected<" in page
    assert "all-rejected: 200 of 200 measured requests were rejected" in page
    assert "200 (queue_full: 200)" in page


def test_every_arm_without_finished_requests(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "r", {"a": 200, "b": 200})
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == 3  # empty panels say so inside the image


def test_a_missing_table_becomes_a_note(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "r", {"a": 0, "b": 5})
    (folder / "timeseries.parquet").unlink()
    (folder / "plots").mkdir()
    (folder / "plots" / "timelines.png").write_bytes(b"stale")
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == 2
    assert "timeseries.parquet is missing from the results folder" in _notes(page)
    assert not (folder / "plots" / "timelines.png").exists()  # no stale plot beside the page


def test_missing_columns_cost_only_their_panels(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "r", {"a": 0})
    requests = pd.read_parquet(folder / "requests.parquet").drop(columns=["tpot_s"])
    requests.to_parquet(folder / "requests.parquet", index=False)
    series = pd.read_parquet(folder / "timeseries.parquet").drop(columns=["kv_utilization_mean"])
    series.to_parquet(folder / "timeseries.parquet", index=False)
    page = write_report(folder).read_text(encoding="utf-8")
    assert page.count(IMAGE) == 3
    notes = _notes(page)
    assert "TPOT: no column tpot_s in requests.parquet" in notes
    assert "no column kv_utilization_mean in timeseries.parquet" in notes


def test_unknown_summary_keys_are_ignored_and_known_optional_ones_shown(tmp_path: Path) -> None:
    extra = {"some_future_metric": {"nested": [1, 2]}, "gpus": 3,
             "kv_transfer_s": {"p50": 0.002, "p99": 0.004},
             "tenants": {"chat": {"ttft_s": {"p50": 0.1, "p99": 0.3}, "slo_attainment": 0.97}}}
    folder = write_folder(tmp_path / "r", {"a": 0}, extra_metrics=extra)
    page = comparison_table_html(load_results(folder))
    rows = {row[0]: row[1:] for row in table_text(page)}
    for label, cell in (("GPUs", "3"), ("KV transfer p50 / p99", "2.0 ms / 4.0 ms"),
                        ("tenant chat: SLO attainment", "97.0%")):
        assert rows[label] == [cell], label
    assert "some_future_metric" not in page


def test_rows_show_a_dash_where_an_arm_lacks_a_number() -> None:
    rows = dict(table_rows([{"completed": 10, "rejected": 0}, {"completed": 7}]))
    assert rows["completed"] == [("10", False), ("7", False)]
    assert rows["rejected"] == [("0", False), ("–", False)]
    assert rows["TTFT p50 / p99"] == [("–", False), ("–", False)]
    assert "GPUs" not in rows  # optional rows appear only when some arm has the number


def test_latencies_keep_a_short_unit() -> None:
    assert [duration(v) for v in (0.00042, 0.0151, 303.18, None)] == [
        "420 µs", "15.1 ms", "303.18 s", None]


def test_itl_rows_show_the_max_and_each_requests_longest_gap() -> None:
    metrics = {"itl_s": {"p50": 0.0174, "p99": 1.048, "max": 3.7167},
               "max_gap_s": {"p50": 0.1016, "p99": 1.8609, "max": 3.7167}}
    rows = dict(table_rows([metrics]))
    assert rows["ITL p50 / p99 / max"] == [("17.4 ms / 1.05 s / 3.72 s", False)]
    assert rows["per-request max gap p50 / p99"] == [("101.6 ms / 1.86 s", False)]


def test_the_table_cells_read_as_the_rows_say(tmp_path: Path) -> None:
    """Laid out by Styler, the table shows exactly `table_rows`' text, escaped once, with the
    alert class on the alert cells only."""
    folder = write_folder(tmp_path / "r", {"a": 0, "b <&> c": 3})
    results = load_results(folder)
    cells = table_cells(comparison_table_html(results))
    rows = table_rows([arm.metrics for arm in results.arms])
    assert [text for _, _, text in cells[0]] == ["metric", "a", "b <&> c"]
    assert [[text for _, _, text in row] for row in cells[1:]] == [
        [label, *(text for text, _ in row)] for label, row in rows]
    assert [["alert" in css.split() for _, css, _ in row[1:]] for row in cells[1:]] == [
        [alert for _, alert in row] for _, row in rows]
