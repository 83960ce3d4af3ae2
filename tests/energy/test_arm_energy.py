"""Energy and cost in a real run's summary: over the window, every pool's GPUs, priced by
profile name or alias, null with the reason when a profile has no power or no price."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import ExperimentResult, run_experiment

EXPERIMENT: dict[str, Any] = {
    "name": "energy", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "max_model_len": 2048, "replicas": 2,
    "workload": {"arrivals": {"kind": "poisson", "rate": 6.0},
                 "prompt_tokens": {"kind": "uniform", "low": 64, "high": 1024},
                 "output_tokens": {"kind": "uniform", "low": 16, "high": 128},
                 "num_requests": 120},
    "warmup_s": 1.0,
    "pricing": {"h100": 2.5},  # an alias of h100-sxm
    "policies": [
        {"name": "vllm", "kind": "continuous", "max_num_seqs": 32},
        {"name": "split", "kind": "disaggregated", "prefill_replicas": 1, "decode_replicas": 2,
         "decode_hardware": "h200-sxm", "kv_link": {"bandwidth_gb_s": 50}},
    ],
}


def _run(tmp_path: Path, **changes: Any) -> ExperimentResult:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, **changes}), encoding="utf-8")
    exp, base_dir = load_experiment(path, [])
    return run_experiment(exp, base_dir)


def _tokens(metrics: dict[str, Any]) -> tuple[float, float]:
    window = metrics["window_s"]
    return (metrics["output_throughput_tps"] * window, metrics["total_throughput_tps"] * window)


def test_colocated_arm_costs_its_gpus_over_the_window(tmp_path: Path) -> None:
    metrics = _run(tmp_path).arms[0].metrics
    output, total = _tokens(metrics)
    usd = 2 * 2.5 * metrics["window_s"] / 3600.0  # 2 replicas × 1 GPU at $2.5
    cost = metrics["cost"]
    assert cost["usd"] == pytest.approx(usd)
    assert cost["usd_per_million_output_tokens"] == pytest.approx(usd / output * 1e6)
    assert cost["usd_per_million_total_tokens"] == pytest.approx(usd / total * 1e6)
    energy = metrics["energy"]
    assert energy["reason"] is None
    assert energy["joules_per_output_token"] * output == pytest.approx(energy["joules"])
    # Mean watts lie between idle and TDP, above idle by the busy share at least × 120 W
    # (memory-bound 200 W − idle 80 W of the H100 profile).
    busy = metrics["gpu_busy_fraction"]
    assert 80.0 + 120.0 * busy <= energy["mean_power_per_gpu_w"] <= 700.0
    assert energy["joules"] == pytest.approx(energy["mean_power_per_gpu_w"] * 2
                                             * metrics["window_s"])


def test_disaggregated_arm_counts_both_pools_and_names_the_missing_price(
        tmp_path: Path) -> None:
    metrics = _run(tmp_path).arms[1].metrics
    assert metrics["gpus"] == 3
    assert metrics["cost"]["gpu_hours"] == pytest.approx(3 * metrics["window_s"] / 3600.0)
    assert metrics["cost"]["usd"] is None
    assert "no price for 'h200-sxm' in `pricing`" in metrics["cost"]["reason"]
    priced = _run(tmp_path, pricing={"h100-sxm": 2.5, "h200": 4.0}).arms[1].metrics
    assert priced["cost"]["usd"] == pytest.approx((2.5 + 2 * 4.0) * priced["window_s"] / 3600)
    energy = priced["energy"]
    assert energy["joules"] == pytest.approx(energy["mean_power_per_gpu_w"] * 3
                                             * priced["window_s"])


def test_a_profile_without_power_gives_null_energy_and_says_why(tmp_path: Path) -> None:
    shipped = Path(str(files("batchsim.hardware_profiles"))) / "gpus" / "h100-sxm.yaml"
    document = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    del document["power"]
    (tmp_path / "nopower.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    result = _run(tmp_path, hardware="nopower.yaml", pricing={},
                  policies=EXPERIMENT["policies"][:1])
    metrics = result.arms[0].metrics
    assert metrics["energy"]["joules"] is None
    assert metrics["energy"]["joules_per_output_token"] is None
    assert "has no `power` block" in metrics["energy"]["reason"]
    assert metrics["cost"]["usd"] is None
    assert "set `pricing`" in metrics["cost"]["reason"]
