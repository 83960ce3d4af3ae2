"""The shipped plans of docs/how-to/capacity-planning.md's "Prefill:decode splits" and
"Autoscaler bounds" sections give the tables the how-to quotes (with -m slow: about a minute
each on two cores)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchsim.apps.executors import LocalProcesses
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document

REPO = Path(__file__).resolve().parents[2]
HOW_TO = (REPO / "docs" / "how-to" / "capacity-planning.md").read_text("utf-8")


def _section(title: str) -> str:
    return HOW_TO.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _rows(text: str) -> list[list[str]]:
    """The cells of the section's numbered table rows."""
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in text.splitlines() if re.match(r"^\| \d+ \|", line)]


def _split_label(cell: str) -> str:
    """The doc's `split, prefill TP1 × 2 + decode TP2 × 1` or `sarathi, TP2 × 2` as a label."""
    pools = re.fullmatch(r"split, prefill TP(\d) × (\d) \+ decode TP(\d) × (\d)", cell)
    if pools:
        return "split h100-sxm prefill tp{} x{} + decode tp{} x{}".format(*pools.groups())
    colocated = re.fullmatch(r"sarathi, TP(\d) × (\d)", cell)
    assert colocated is not None, cell
    return "sarathi h100-sxm tp{} x{}".format(*colocated.groups())


@pytest.mark.slow  # 45 runs of Llama-3.1-8B at 32 req/s: about a minute
def test_the_disaggregated_plan_gives_the_quoted_table(tmp_path: Path) -> None:
    file = REPO / "experiments" / "capacity_plan_disaggregated.yaml"
    document = plan_document(run_plan(file, [], tmp_path, LocalProcesses(2)), {})
    ranked = document["variants"][0]["candidates"]["ranked"]
    quoted = _rows(_section("Prefill:decode splits"))
    meeting = [row for row in ranked if row["status"] == "meets"]
    assert len(meeting) == len(quoted)
    for row, cells in zip(meeting, quoted, strict=True):
        p99 = {key: value["judged"] * 1000 for key, value in row["p99"].items()}
        assert [str(row["rank"]), row["label"], str(row["gpus"]), f"${row['usd_per_hour']:.2f}",
                f"${row['usd_per_million_output_tokens']:.2f}",
                f"{p99['ttft_p99_s']:.0f} ms", f"{p99['tpot_p99_s']:.1f} ms"] == [
            cells[0], _split_label(cells[1]), *cells[2:]]


@pytest.mark.slow  # 8 runs of the 864 s diurnal day: about a minute
def test_the_autoscaling_plan_gives_the_quoted_table(tmp_path: Path) -> None:
    file = REPO / "experiments" / "capacity_plan_autoscaling.yaml"
    document = plan_document(run_plan(file, [], tmp_path, LocalProcesses(2)), {})
    ranked = document["variants"][0]["autoscaling"]["ranked"]
    quoted = _rows(_section("Autoscaler bounds"))
    assert len(ranked) == len(quoted)
    for row, cells in zip(ranked, quoted, strict=True):
        kind = re.fullmatch(r"fixed × (\d)|autoscaled (\d)–(\d)", cells[1])
        assert kind is not None
        fixed, low, high = kind.groups()
        where = "sarathi h100-sxm tp1 "
        assert row["label"] == (where + f"fixed x{fixed}" if fixed else
                                where + f"auto {low}-{high} target 48")
        assert [f"{row['gpu_hours']:.3f}", f"${row['usd']:.2f}",
                f"${row['usd_per_million_output_tokens']:.2f}",
                f"{row['replicas_paid_mean']:.2f}", f"{row['slo_attainment']:.1%}"] == cells[2:7]
        assert row["status"] == cells[8].split(" ", 1)[0]
