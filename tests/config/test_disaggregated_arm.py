"""The `disaggregated` arm: its defaults, its errors, its per-pool resolution and its outputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.policy_factory import ArmError
from batchsim.experiment.runner import run_experiment
from batchsim.experiment.schema import DisaggregatedArm, Experiment, KVLinkConfig
from tests.config.test_config_loader import only_problem

WriteYaml = Callable[[str | dict[str, Any]], Path]
DISTSERVE = {"name": "distserve", "kind": "disaggregated", "prefill_replicas": 1,
             "decode_replicas": 1, "kv_link": {"bandwidth_gb_s": 50, "latency_us": 10}}


def test_the_design_example_parses_with_defaults(minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"].append(DISTSERVE)
    arm = Experiment.model_validate(minimal_data).policies[2]
    assert isinstance(arm, DisaggregatedArm)
    assert arm.kv_link == KVLinkConfig(bandwidth_gb_s=50, latency_us=10, layerwise=False)
    assert (arm.prefill_hardware, arm.decode_tensor_parallel, arm.prefill_chunked) == (
        None, None, False)
    assert (arm.decode_max_num_seqs, arm.decode_preemption) == (256, "recompute")


def test_unknown_and_bad_link_keys_name_their_path(write_yaml: WriteYaml,
                                                   minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"] = [{**DISTSERVE, "kv_link": {"bandwith_gb_s": 50}}]
    assert only_problem(write_yaml(minimal_data)).startswith(
        "policies.0.kv_link.bandwith_gb_s: unknown key")
    minimal_data["policies"] = [{**DISTSERVE, "kv_link": {"bandwidth_gb_s": 0}}]
    assert only_problem(write_yaml(minimal_data)) == (
        "policies.0.kv_link.bandwidth_gb_s: expected a number > 0, nics or null (got 0)")


def _run(tmp_path: Path, data: dict[str, Any], *sets: str):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    exp, base_dir = load_experiment(path, sets)
    return run_experiment(exp, base_dir)


def test_a_pool_tensor_parallel_that_cannot_split_the_model_names_its_key(
        tmp_path: Path, minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"] = [{**DISTSERVE, "decode_tensor_parallel": 3}]
    with pytest.raises(ArmError, match=r"^policies\.0\.decode_tensor_parallel \(decode pool\)"):
        _run(tmp_path, minimal_data)


def test_each_pool_is_sized_from_its_own_gpu_and_tensor_parallelism(
        tmp_path: Path, minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"] = [{**DISTSERVE, "prefill_replicas": 2,
                                 "decode_hardware": "h200-sxm", "decode_tensor_parallel": 2}]
    [arm] = _run(tmp_path, minimal_data).arms
    pools = arm.metrics["pools"]
    assert isinstance(pools, dict)
    prefill, decode = pools["prefill"], pools["decode"]
    assert (prefill["hardware"], prefill["gpus"]) == ("h100-sxm", 2)
    assert (decode["hardware"], decode["tensor_parallel"], decode["gpus"]) == ("h200-sxm", 2, 2)
    # An H200 has 141 GB, and two GPUs each hold half the weights and half of every token.
    assert decode["kv_blocks_per_replica"] > 2 * prefill["kv_blocks_per_replica"]
    assert arm.metrics["gpus"] == 4


def test_run_writes_transfer_columns_and_metrics(tmp_path: Path,
                                                 minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"].append(DISTSERVE)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(minimal_data), encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "KV transfer p50 / p99" in result.output  # (ms) may wrap onto a second line
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    mine = requests[requests["arm"] == "distserve"]
    assert mine["finished"].all()
    # 128 prompt tokens × 128 KiB of Llama-3.1-8B KV each, at 50 GB/s, plus 10 µs.
    moved = mine[mine["output_tokens"] > 1]
    assert moved["kv_transfer_s"].to_numpy() == pytest.approx(128 * 131072 / 50e9 + 10e-6)
    assert (moved["kv_handoff_s"] >= moved["kv_transfer_s"] - 1e-12).all()
    assert set(mine["prefill_replica"]) == {0} and set(moved["replica"]) == {1}
    assert requests[requests["arm"] == "vllm"]["kv_transfer_s"].isna().all()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    metrics = {row["arm"]: row["metrics"] for row in summary["rows"]}["distserve"]
    assert set(metrics["kv_transfer_s"]) == {"mean", "p50", "p90", "p99", "p999"}
    assert 0 < metrics["kv_link_utilization"] < 0.01
    assert metrics["pools"]["decode"]["gpu_busy_fraction"] > 0


def test_an_ideal_link_is_set_from_the_command_line(tmp_path: Path,
                                                    minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"] = [DISTSERVE]
    [arm] = _run(tmp_path, minimal_data, "policies.distserve.kv_link.bandwidth_gb_s=null",
                 "policies.distserve.kv_link.latency_us=0").arms
    moved = arm.requests[arm.requests["output_tokens"] > 1]
    assert (moved["kv_transfer_s"] == 0).all()
    assert arm.metrics["kv_link_utilization"] == 0.0
