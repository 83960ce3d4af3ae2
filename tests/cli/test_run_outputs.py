"""`batchsim run` writes the documented files, and the same seed gives the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from tests.validation.experiment_builder import base_experiment

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "queue_delay_s")
GAPS = ("itl_s", "max_gap_s")
SCALARS = ("request_throughput_rps", "output_throughput_tps", "total_throughput_tps",
           "goodput_rps", "slo_attainment", "completed", "rejected", "preemptions",
           "recomputed_tokens", "gpu_busy_fraction")


def _run(args: list[str]) -> None:
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output


def _preempting_swap_experiment(tmp_path: Path) -> Path:
    exp = base_experiment(
        name="swap",
        kv_cache={"num_blocks": 600, "swap_space_gb": 0.05},
        workload={
            "arrivals": {"kind": "closed_loop", "concurrency": 24, "think_time_s": 0.1},
            "prompt_tokens": {"kind": "lognormal", "mean": 300, "cv": 1.0},
            "output_tokens": {"kind": "geometric", "mean": 120},
            "num_requests": 300,
        },
        policies=[
            {"name": "swap", "kind": "continuous", "preemption": "swap"},
            {"name": "recompute", "kind": "continuous"},
            {"name": "static", "kind": "static", "max_batch_size": 8, "max_wait_s": 0.05},
        ],
    )
    path = tmp_path / "swap.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def test_same_seed_gives_byte_identical_outputs(tmp_path: Path) -> None:
    for experiment in (REPO / "experiments" / "quickstart.yaml",
                       _preempting_swap_experiment(tmp_path)):
        first, second = tmp_path / "a", tmp_path / "b"
        _run([str(experiment), "--out", str(first)])
        _run([str(experiment), "--out", str(second)])
        for name in ("summary.json", "requests.parquet", "timeseries.parquet"):
            assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_another_seed_gives_other_numbers(tmp_path: Path) -> None:
    experiment = _preempting_swap_experiment(tmp_path)
    _run([str(experiment), "--out", str(tmp_path / "a")])
    _run([str(experiment), "--out", str(tmp_path / "b"), "--set", "seed=2"])
    a = (tmp_path / "a" / "requests.parquet").read_bytes()
    assert a != (tmp_path / "b" / "requests.parquet").read_bytes()


def test_summary_and_tables_have_the_documented_shape(tmp_path: Path) -> None:
    experiment = _preempting_swap_experiment(tmp_path)
    _run([str(experiment), "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary) >= {"config", "versions", "rows"}
    assert summary["config"]["name"] == "swap"
    assert [row["arm"] for row in summary["rows"]] == ["swap", "recompute", "static"]
    for row in summary["rows"]:
        metrics = row["metrics"]
        assert row["point"] == {}
        for name in LATENCIES:
            assert set(metrics[name]) == {"mean", "p50", "p90", "p99", "p999"}
        for name in GAPS:  # token gaps also keep their max: one stall is the story
            assert set(metrics[name]) == {"mean", "p50", "p90", "p99", "p999", "max"}
        for name in SCALARS:
            assert name in metrics
        assert set(metrics["kv_utilization"]) == {"mean", "max"}
        assert metrics["completed"] + metrics["rejected"] == 300
    by_arm = {row["arm"]: row["metrics"] for row in summary["rows"]}
    assert by_arm["recompute"]["recomputed_tokens"] > 0
    assert by_arm["swap"]["preemptions"] > 0
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    assert len(requests) == 3 * 300  # one row per request per arm
    assert requests.groupby("arm")["request_id"].nunique().eq(300).all()
    series = pd.read_parquet(tmp_path / "out" / "timeseries.parquet")
    assert {"arm", "t_start_s", "batch_size", "num_waiting", "kv_utilization_mean",
            "new_tokens", "output_tokens"} <= set(series.columns)
    assert series.groupby("arm")["output_tokens"].sum().eq(
        requests.groupby("arm")["output_tokens"].sum()).all()
