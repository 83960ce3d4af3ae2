"""Plans on real (tiny) runs: overload and rejections fail a configuration even when the
percentiles of the requests served look fine; configurations that do not fit are reported,
not crashed on; executors agree."""

from __future__ import annotations

import json
from pathlib import Path

from batchsim.apps.executors import InProcess, LocalProcesses
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document
from tests.plan.tiny import write_experiment


def _candidates(file: Path, out: Path) -> list[dict]:
    document = plan_document(run_plan(file, [], out, InProcess()), {})
    ranked: list[dict] = document["variants"][0]["candidates"]["ranked"]
    return ranked


def test_an_overloaded_run_misses_by_its_growing_queue(tmp_path: Path) -> None:
    # Twice continuous batching's capacity, judged on TPOT only: the batch is capped, so
    # TPOT stays low while the queue (and TTFT) grows for as long as requests arrive.
    plan = {"slo": {"tpot_p99_s": 0.05}, "target_rate": 66,
            "candidates": {"policies": ["vllm"]}}
    (row,) = _candidates(write_experiment(tmp_path, plan), tmp_path / "plan")
    assert row["status"] == "misses" and row["missed"] == ["queue"]
    assert row["p99"]["tpot_p99_s"]["judged"] < 0.05
    (trend,) = row["ttft_trend"]
    assert trend["growth_per_s"] > 0.3  # about load / capacity - 1
    assert row["metrics"]["request_throughput_rps"] < 40


def test_rejected_requests_count_as_misses(tmp_path: Path) -> None:
    # Admission control keeps the queue short by rejecting arrivals: what it serves is fast,
    # but more than 1% of the requests never got an answer.
    arm = {"name": "vllm", "kind": "continuous", "max_num_seqs": 16,
           "admission": {"max_queue": 4}}
    plan = {"target_rate": 66, "candidates": {"policies": ["vllm"]}}
    file = write_experiment(tmp_path, plan, policies=[arm])
    (row,) = _candidates(file, tmp_path / "plan")
    assert row["status"] == "misses" and row["missed"] == ["rejections"]
    assert row["rejected_fraction"][0] > 0.01
    assert row["metrics"]["ttft_s"]["p99"] < 1.0  # the served requests alone would pass
    assert row["p99"]["ttft_p99_s"]["judged"] is None  # infinite: null in JSON


def test_an_arm_that_does_not_fit_is_reported_not_run(tmp_path: Path) -> None:
    file = write_experiment(tmp_path, {"rate": {"low": 2, "high": 10, "tolerance": 2}},
                            tensor_parallel=3)
    result = run_plan(file, [], tmp_path / "plan", InProcess())
    for search in result.variants[0].max_rate:
        assert search.status == "does not fit" and search.bisection.steps == []
        assert "does not divide" in (search.does_not_fit or "")
    assert not (tmp_path / "plan" / "base").exists()


def test_executors_give_the_same_plan(tmp_path: Path) -> None:
    plan = {"target_rate": 20, "candidates": {"replicas": [1, 2]}}
    file = write_experiment(tmp_path, plan, replications=2)
    documents = [plan_document(run_plan(file, [], tmp_path / name, executor), {})
                 for name, executor in (("one", InProcess()), ("two", LocalProcesses(2)))]
    assert json.dumps(documents[0]) == json.dumps(documents[1])
    ranked = documents[0]["variants"][0]["candidates"]["ranked"]
    assert all(row["ci95"] is not None for row in ranked)  # replications give intervals
