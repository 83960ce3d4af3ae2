"""Lower KV tiers on the shipped Mooncake slice (shortened): tiers that hold nothing change no
output; tiers of infinite bandwidth hit what an unbounded GPU cache hits; a finite bandwidth
costs each loaded block its bytes over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchsim.experiment.outputs import write_results
from batchsim.experiment.runner import ExperimentResult
from tests.validation.experiment_builder import base_experiment, run_dict

MOONCAKE = {"kind": "trace", "path": "mooncake-conversation", "format": "mooncake",
            "window_s": [0, 60], "filter": {"max_prompt_tokens": 16000}}


def _mooncake(kv_cache: dict[str, Any], max_num_seqs: int = 64) -> dict[str, Any]:
    return base_experiment(
        max_model_len=32768, kv_cache={"prefix_caching": True, **kv_cache},
        workload={"arrivals": MOONCAKE},
        policies=[{"name": "arm", "kind": "chunked_prefill", "token_budget": 4096,
                   "max_num_seqs": max_num_seqs}],
        output={"timeseries_bin_s": 5.0})


def _written(tmp_path: Path, name: str, exp: dict[str, Any]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    write_results(run_dict(folder, exp), folder / "out")
    return folder / "out"


def test_tiers_that_hold_nothing_change_no_output(tmp_path: Path) -> None:
    """2,500 GPU blocks evict often; the tiers' capacity 0 passes each evicted block over."""
    tiers = [{"kind": "cpu", "capacity_gb": 0, "bandwidth_gb_s": 25},
             {"kind": "disk", "capacity_gb": 0}]
    plain = _written(tmp_path, "plain", _mooncake({"num_blocks": 2500}))
    tiered = _written(tmp_path, "tiered", _mooncake({"num_blocks": 2500, "tiers": tiers}))
    assert (plain / "timeseries.parquet").read_bytes() == \
        (tiered / "timeseries.parquet").read_bytes()
    with_tiers = pd.read_parquet(tiered / "requests.parquet")
    assert (with_tiers[["cached_tokens_cpu", "cached_tokens_disk"]] == 0).all().all()
    pd.testing.assert_frame_equal(
        pd.read_parquet(plain / "requests.parquet"),
        with_tiers.drop(columns=["cached_tokens_cpu", "cached_tokens_disk"]), check_exact=True)
    before = json.loads((plain / "summary.json").read_text("utf-8"))
    after = json.loads((tiered / "summary.json").read_text("utf-8"))
    assert [t["kind"] for t in after["config"]["kv_cache"].pop("tiers")] == ["cpu", "disk"]
    assert before["config"]["kv_cache"].pop("tiers") == []
    metrics = after["rows"][0]["metrics"]
    moved = metrics.pop("kv_tiers")
    assert moved["bytes_moved"] == 0 and moved["load_s"] == 0
    assert before == after
    assert metrics["prefix_cache"]["cached_tokens"] > 0  # the GPU cache did hit


def _hit_rate(result: ExperimentResult) -> float:
    return float(result.arms[0].metrics["prefix_cache"]["hit_rate_blocks"])


def test_tiers_of_infinite_bandwidth_hit_what_an_unbounded_cache_hits(tmp_path: Path) -> None:
    """Served one at a time, every block the small GPU cache evicts waits in a tier, so the
    hits are the unbounded cache's, request by request, at the same times."""
    unbounded = run_dict(tmp_path, _mooncake({"num_blocks": 1_000_000}, max_num_seqs=1))
    tiers = [{"kind": "cpu", "capacity_gb": 2}, {"kind": "disk", "capacity_gb": 10_000}]
    tiered = run_dict(tmp_path, _mooncake({"num_blocks": 1200, "tiers": tiers},
                                          max_num_seqs=1))
    assert _hit_rate(tiered) == _hit_rate(unbounded) > 0.05
    a, b = unbounded.arms[0].requests, tiered.arms[0].requests
    assert (a["cached_tokens"] == b["cached_tokens"]).all()
    assert (a["first_token_s"] == b["first_token_s"]).all()
    kv = tiered.arms[0].metrics["kv_tiers"]
    assert kv["tiers"]["disk"]["hit_rate_blocks"] > 0  # the cascade reached the disk tier
    rates = [kv["gpu_hit_rate_blocks"]] + [t["hit_rate_blocks"] for t in kv["tiers"].values()]
    assert sum(rates) == pytest.approx(_hit_rate(tiered), rel=1e-12)


def test_a_finite_bandwidth_costs_each_loaded_block_its_bytes_over_it(tmp_path: Path) -> None:
    tiers = [{"kind": "cpu", "capacity_gb": 1000, "bandwidth_gb_s": 2.0}]
    free = run_dict(tmp_path, _mooncake({"num_blocks": 1200, "tiers": [
        {"kind": "cpu", "capacity_gb": 1000}]}, max_num_seqs=1))
    paid = run_dict(tmp_path, _mooncake({"num_blocks": 1200, "tiers": tiers}, max_num_seqs=1))
    cpu = paid.arms[0].metrics["kv_tiers"]["tiers"]["cpu"]
    block_bytes = 16 * 131072  # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B
    assert cpu["bytes_loaded"] == cpu["blocks_loaded"] * block_bytes > 0
    assert cpu["load_s"] == pytest.approx(cpu["blocks_loaded"] * block_bytes / 2e9, rel=1e-9)
    assert _hit_rate(paid) == _hit_rate(free)  # one at a time, time changes no hit
    assert (paid.arms[0].requests["first_token_s"]
            >= free.arms[0].requests["first_token_s"]).all()


# The whole slice, three arms (about half a minute): the how-to's table.
@pytest.mark.slow
def test_the_shipped_experiment_hits_more_and_waits_less_with_each_tier() -> None:
    from batchsim.experiment.loader import load_experiment
    from batchsim.experiment.runner import run_experiment

    repo = Path(__file__).resolve().parents[2]
    exp, base_dir = load_experiment(repo / "experiments" / "mooncake_kv_tiers.yaml")
    arms = {arm.name: arm.metrics for arm in run_experiment(exp, base_dir).arms}
    rates = [float(arms[name]["prefix_cache"]["hit_rate_blocks"])
             for name in ("gpu_only", "cpu_tier", "cpu_disk_tiers")]
    assert rates[0] < rates[1] < rates[2], rates
    p99 = [arms[name]["ttft_s"]["p99"] for name in ("gpu_only", "cpu_tier", "cpu_disk_tiers")]
    assert p99[0] > p99[1] > p99[2], p99
    assert "kv_tiers" not in arms["gpu_only"]
