"""summary.json's `bench_compat` block: `vllm bench serve`'s names and definitions
(vllm/benchmarks/serve.py `calculate_metrics`), recomputed here from the run's request table
and token gaps (docs/reference/outputs.md, "bench_compat")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from batchsim.metrics.bench_compat import weighted_std
from tests.validation.experiment_builder import base_experiment, run_dict

REPO = Path(__file__).resolve().parents[2]
VLLM_KEYS = [
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    *(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el")
      for stat in ("mean", "median", "std", "p99")),
]


def test_the_block_is_vllms_numbers_computed_from_the_request_records() -> None:
    exp, base_dir = load_experiment(REPO / "experiments" / "quickstart.yaml",
                                    ["workload.duration_s=20"])
    result = run_experiment(exp, base_dir, keep_token_gaps=True)
    for arm in result.arms:
        block = arm.metrics["bench_compat"]
        assert isinstance(block, dict)
        assert list(block) == VLLM_KEYS
        table = arm.requests
        measured = table[table["arrival_s"] >= exp.warmup_s]  # no cool-down
        done = measured[measured["finished"]]
        duration = float(done["finish_s"].max()) - exp.warmup_s
        assert block["duration"] == pytest.approx(duration, rel=1e-12)
        assert block["completed"] == len(done)
        assert block["failed"] == len(measured) - len(done)
        assert block["total_input_tokens"] == done["prompt_tokens"].sum()
        assert block["total_output_tokens"] == done["output_tokens"].sum()
        assert block["request_throughput"] == pytest.approx(len(done) / duration)
        assert block["output_throughput"] == pytest.approx(done["output_tokens"].sum() / duration)
        assert block["total_token_throughput"] == pytest.approx(
            (done["prompt_tokens"].sum() + done["output_tokens"].sum()) / duration)
        # vLLM's goodput: completed requests under every target, a one-token TPOT as 0.
        tpot = done["tpot_s"].fillna(0.0)
        good = (done["ttft_s"] <= exp.slo.ttft_p99_s) & (tpot <= exp.slo.tpot_p99_s)
        assert block["request_goodput"] == pytest.approx(good.sum() / duration)
        assert arm.token_gaps is not None
        gaps_by_request = arm.token_gaps.gaps_by_request(len(table))
        itls = np.array([gap for request_id in measured["request_id"]
                         for gap in gaps_by_request[request_id]])
        samples = {"ttft": done["ttft_s"].to_numpy(), "tpot": done["tpot_s"].dropna().to_numpy(),
                   "itl": itls, "e2el": done["e2e_s"].to_numpy()}
        for name, values in samples.items():
            assert block[f"mean_{name}_ms"] == pytest.approx(np.mean(values) * 1000, rel=1e-9)
            assert block[f"median_{name}_ms"] == pytest.approx(np.median(values) * 1000,
                                                               rel=1e-9)
            assert block[f"std_{name}_ms"] == pytest.approx(np.std(values) * 1000, rel=1e-9)
            assert block[f"p99_{name}_ms"] == pytest.approx(np.percentile(values, 99) * 1000,
                                                            rel=1e-9)
        # Our own names stay, and say the same.
        assert block["request_throughput"] == arm.metrics["request_throughput_rps"]
        assert block["request_goodput"] is not None
        assert block["request_goodput"] == arm.metrics["goodput_rps"]


def test_without_an_slo_there_is_no_goodput(tmp_path: Path) -> None:
    block = run_dict(tmp_path, base_experiment()).arms[0].metrics["bench_compat"]
    assert isinstance(block, dict)
    assert block["request_goodput"] is None
    assert block["completed"] == 100


def test_weighted_std_is_numpys_on_the_expanded_sample() -> None:
    values = np.array([0.5, 1.25, 2.0, 7.5])
    weights = np.array([3, 1, 4, 2], dtype=np.int32)
    expanded = np.repeat(values, weights)
    assert weighted_std(values, weights, float(expanded.mean())) == \
        pytest.approx(float(np.std(expanded)), rel=1e-14)


def test_with_tenants_goodput_is_counted_against_each_tenants_slo() -> None:
    exp, base_dir = load_experiment(REPO / "experiments" / "slo_classes.yaml",
                                    ["workload.duration_s=10"])
    assert exp.slo.ttft_p99_s is None and exp.workload.tenants is not None  # tenant SLOs only
    for arm in run_experiment(exp, base_dir).arms:
        block = arm.metrics["bench_compat"]
        assert isinstance(block, dict)
        assert block["request_goodput"] is not None
        assert block["request_goodput"] == arm.metrics["goodput_rps"]
