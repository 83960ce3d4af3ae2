"""`calibrate measure --device cpu --quick` runs the real benchmarks and round-trips through fit."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.calibration.measure.forward import step_shapes
from batchsim.calibration.tables import REQUIRED_COLUMNS, load_measurements
from batchsim.gpu.hardware import load_gpu_profile

pytest.importorskip("torch")

# Rough CPU "spec sheet": efficiencies are fractions of these, so keep them generous.
_CPU_SPEC = """\
name: test-cpu
description: the CI machine's CPU, to exercise the measurement path
peak_flops: {bf16: 1.0e12, int8: 2.0e12}
memory_bandwidth_bytes_per_s: 1.0e11
memory_bytes: 17179869184
intra_node_bandwidth_bytes_per_s: 1.0e10
pcie_bandwidth_bytes_per_s: 1.0e10
p2p_latency_s: 1.0e-5
gpus_per_node: 1
runtime_reserve_bytes: 0
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpu-measurements")
    result = CliRunner().invoke(
        app, ["calibrate", "measure", "--device", "cpu", "--quick", "--repeats", "3",
              "--warmup", "1", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    return out


def test_measure_writes_the_public_tables_columns_and_device_info(measured: Path) -> None:
    tables = load_measurements(measured)
    assert set(tables) == {"gemm", "prefill_attention", "decode_attention"}
    for family, table in tables.items():
        raw = pd.read_csv(measured / table.source.file)
        assert set(REQUIRED_COLUMNS[family]) <= set(raw.columns)
        assert (raw["latency"] > 0).all()
    device = json.loads((measured / "device.json").read_text())
    assert device["device_type"] == "cpu"
    assert device["allreduce"].startswith("skipped")
    assert device["copy_bandwidth_bytes_per_s"] > 0
    assert device["forward_steps"].startswith("measured: a two-layer toy")
    assert not any("time" in key and key != "timing" for key in device)  # no timestamps


def test_cpu_measurements_round_trip_through_fit(measured: Path, tmp_path: Path) -> None:
    spec = tmp_path / "cpu-spec.yaml"
    spec.write_text(_CPU_SPEC, encoding="utf-8")
    out = tmp_path / "cpu-profile.yaml"
    result = CliRunner().invoke(
        app, ["calibrate", "fit", "--gpu-spec", str(spec), "--measurements", str(measured),
              "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    profile = load_gpu_profile(str(out))
    assert profile.name == "test-cpu"
    assert profile.efficiency.calibrated is True
    assert profile.calibration is not None
    assert set(profile.calibration.heldout_error) == {
        "gemm", "decode_attention", "prefill_attention"
    }
    # No GPUs to all-reduce across: those keys stay at the spec's priors, and say so.
    assert "allreduce_bandwidth_efficiency" in profile.calibration.not_fitted


def test_measure_times_whole_forward_steps_of_every_shape(measured: Path) -> None:
    steps = pd.read_csv(measured / "forward_steps_bf16.csv")
    shapes = step_shapes(quick=True)
    assert len(steps) == len(shapes)
    assert list(zip(steps["phase"], steps["batch_size"], steps["new_tokens"], steps["context"],
                    strict=True)) == [(s.phase, s.batch, s.new_tokens, s.context) for s in shapes]
    assert not steps["compiled"].any() and not steps["cuda_graph"].any()
    assert (steps["latency"] > 0).all()


def test_forward_steps_can_be_left_out(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["calibrate", "measure", "--device", "cpu", "--quick", "--repeats", "1",
              "--warmup", "0", "--no-forward-steps", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "forward_steps_bf16.csv").exists()
    assert json.loads((tmp_path / "device.json").read_text())["forward_steps"].startswith(
        "skipped")
