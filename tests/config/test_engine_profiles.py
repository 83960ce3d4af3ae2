"""Engine profiles: the shipped ones load and cite their defaults; bad ones are refused by key."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.experiment.engine_profile import (
    EngineProfileError,
    list_engine_profiles,
    load_engine_profile,
)
from batchsim.gpu.hardware import load_gpu_profile
from tests.validation.experiment_builder import base_experiment, run_dict

SHIPPED = [name for name in list_engine_profiles() if name != "none"]


def test_the_three_engines_ship() -> None:
    assert SHIPPED == ["sglang", "trtllm", "vllm"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_scheduling_default_cites_where_it_comes_from(name: str) -> None:
    spec = load_engine_profile(name).spec
    assert spec.scheduler is not None and spec.version
    for key in type(spec.scheduler).model_fields:
        assert len(spec.sources.get(key, "")) > 20, (name, key)


def test_engine_costs_replace_the_gpu_priors_and_none_keeps_them() -> None:
    gpu = load_gpu_profile("h100-sxm")
    assert load_engine_profile("none").on_gpu(gpu) is gpu
    vllm = load_engine_profile("vllm")
    moved = vllm.on_gpu(gpu).efficiency
    costs = vllm.spec.costs
    expected_step = gpu.efficiency.step_overhead_s if costs.step_overhead_s is None \
        else costs.step_overhead_s
    assert moved.step_overhead_s == expected_step
    # Compute-bound kernels at the engine's scale; memory traffic as the GPU profile has it.
    assert moved.gemm_peak_efficiency == gpu.efficiency.gemm_peak_efficiency / costs.compute_scale
    assert moved.memory_efficiency == gpu.efficiency.memory_efficiency


def test_an_unknown_engine_is_refused_with_the_names_that_exist(tmp_path: Path) -> None:
    with pytest.raises(EngineProfileError, match="unknown engine 'tgi'; shipped: none, sglang"):
        load_engine_profile("tgi")
    bad = tmp_path / "mine.yaml"
    bad.write_text("name: mine\ncosts: {step_overhead_s: -1}\n", encoding="utf-8")
    with pytest.raises(EngineProfileError, match=r"mine\.yaml: costs\.step_overhead_s: "):
        load_engine_profile(str(bad))


def test_validate_refuses_what_run_would(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\nengine: tgi\n"
                   "workload: {arrivals: {kind: poisson, rate: 1}, num_requests: 5,\n"
                   "  prompt_tokens: {kind: fixed, value: 8}, output_tokens: {kind: fixed, "
                   "value: 4}}\n"
                   "policies: [{name: a, kind: continuous}]\n", encoding="utf-8")
    for command in ("validate", "run"):
        done = CliRunner().invoke(app, [command, str(exp)])
        assert done.exit_code == 2, done.output
        assert "engine: unknown engine 'tgi'" in done.output and "Traceback" not in done.output


def test_the_old_engine_mapping_says_where_fast_path_went(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
                   "engine: {fast_path: false}\n"
                   "workload: {arrivals: {kind: poisson, rate: 1}, num_requests: 5}\n"
                   "policies: [{name: a, kind: continuous}]\n", encoding="utf-8")
    done = CliRunner().invoke(app, ["validate", str(exp)])
    assert done.exit_code == 2
    assert "engine" in done.output and "simulation.fast_path" in done.output


def test_an_engine_slows_a_run_by_its_costs(tmp_path: Path) -> None:
    """The same experiment with the bare roofline and with an engine profile whose costs are
    known: every request waits the front-end latency, and steps cost more."""
    profile = tmp_path / "slow.yaml"
    profile.write_text("name: slow\ncosts: {frontend_latency_s: 0.5, step_overhead_s: 0.01}\n",
                       encoding="utf-8")
    exp = base_experiment(
        workload={"arrivals": {"kind": "poisson", "rate": 0.2},
                  "prompt_tokens": {"kind": "fixed", "value": 128},
                  "output_tokens": {"kind": "fixed", "value": 16}, "num_requests": 6},
        policies=[{"name": "a", "kind": "chunked_prefill"}], engine="none")
    [bare] = run_dict(tmp_path, exp).arms
    [slow] = run_dict(tmp_path, {**exp, "engine": str(profile)}).arms
    assert (slow.requests["ttft_s"] > bare.requests["ttft_s"] + 0.5).all()
    prior = load_gpu_profile("h100-sxm").efficiency.step_overhead_s  # what the 0.01 s replaces
    assert (slow.requests["tpot_s"] > bare.requests["tpot_s"] + 0.01 - prior - 1e-9).all()


def test_engines_lists_every_profile() -> None:
    done = CliRunner().invoke(app, ["engines"])
    assert done.exit_code == 0
    assert [line.split()[0] for line in done.output.splitlines()] == list_engine_profiles()


def test_an_arm_can_run_with_its_own_engine(tmp_path: Path) -> None:
    profile = tmp_path / "slow.yaml"
    profile.write_text("name: slow\ncosts: {frontend_latency_s: 0.5}\n", encoding="utf-8")
    exp = base_experiment(
        workload={"arrivals": {"kind": "poisson", "rate": 0.2},
                  "prompt_tokens": {"kind": "fixed", "value": 128},
                  "output_tokens": {"kind": "fixed", "value": 16}, "num_requests": 6},
        policies=[{"name": "bare", "kind": "chunked_prefill"},
                  {"name": "slow", "kind": "chunked_prefill",
                   "deployment": {"engine": str(profile)}}], engine="none")
    bare, slow = run_dict(tmp_path, exp).arms
    gap = slow.requests["ttft_s"].to_numpy() - bare.requests["ttft_s"].to_numpy()
    assert gap == pytest.approx([0.5] * 6, abs=1e-9)
