"""Per-class rows of the comparison table (SLO classes, docs/how-to/slo-classes.md)."""

from __future__ import annotations

from batchsim.apps.console import _tenant_rows
from batchsim.apps.report.table import table_rows

TENANTS = {"tenants": {
    "interactive": {"ttft_s": {"p50": 0.1, "p99": 0.4}, "slowdown": {"mean": 1.2, "p99": 2.0},
                    "slo_attainment": 1.0, "goodput_rps": 3.3, "preemptions": 0,
                    "rejected_by_reason": {}},
    "batch": {"ttft_s": {"p50": 0.6, "p99": 3.2}, "slowdown": {"mean": 1.7, "p99": 2.9},
              "slo_attainment": 0.596, "goodput_rps": 1.88, "preemptions": 159,
              "rejected_by_reason": {"shed_overload": 91}},
}}


def test_the_report_shows_each_class_goodput_preemptions_and_shed():
    rows = dict(table_rows([TENANTS]))
    assert rows["tenant batch: goodput (req/s)"] == [("1.88", False)]
    assert rows["tenant batch: preemptions / shed"] == [("159 / 91", False)]
    assert rows["tenant interactive: preemptions / shed"] == [("0 / 0", False)]


def test_a_summary_from_before_the_counts_has_no_such_row():
    old = {"tenants": {"chat": {"ttft_s": {"p50": 0.1, "p99": 0.3}, "slo_attainment": 0.97}}}
    assert "tenant chat: preemptions / shed" not in dict(table_rows([old]))


def test_the_console_shows_them_too():
    rows = dict(_tenant_rows(TENANTS))
    assert rows["batch: goodput (req/s)"] == "1.88"
    assert rows["batch: preemptions / shed"] == "159 / 91"
