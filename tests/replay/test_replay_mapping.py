"""How `batchsim replay` maps a benchmark's names and layout to an experiment (no simulation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchsim.apps.api import load_experiment
from batchsim.apps.replay.deployment import (
    BenchmarkClient,
    Layout,
    case_experiment,
    replay_layout,
)
from batchsim.apps.replay.measured import read_cases
from batchsim.apps.replay.names import MODELS, gpu_profile, library_model, weight_dtype
from batchsim.experiment.engine_profile import load_engine_profile
from batchsim.experiment.preflight import check_before_run
from batchsim.gpu.hardware import list_gpu_profiles
from batchsim.gpu.model_spec import library_model_names

HEADER = ["id", "backend", "backend_version", "model_path", "system", "mode", "gemm_quant_mode",
          "isl", "osl", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
          "moe_ep_size", "moe_quant_mode", "silicon_ttft_ms", "silicon_tpot_ms"]
BASE = {"id": "c1", "backend": "sglang", "backend_version": "",
        "model_path": "deepseek-ai/DeepSeek-R1", "system": "h200_sxm", "mode": "agg",
        "gemm_quant_mode": "fp8", "isl": "1024", "osl": "128", "batch_size": "32",
        "tp_size": "8", "pp_size": "1",
        "attention_dp_size": "", "moe_tp_size": "", "moe_ep_size": "", "moe_quant_mode": "",
        "silicon_ttft_ms": "200", "silicon_tpot_ms": "20"}


def _experiment(tmp_path: Path, **changes: str) -> dict[str, Any] | str:
    """The experiment (or the reason) of one row: BASE with `changes`."""
    row = {**BASE, **changes}
    path = tmp_path / "bench.csv"
    path.write_text(",".join(HEADER) + "\n" + ",".join(row[c] for c in HEADER) + "\n",
                    encoding="utf-8")
    cases, skipped = read_cases(path)
    if skipped:
        return skipped[0].reason
    [case] = cases
    return case_experiment(case, BenchmarkClient(), load_engine_profile(case.engine))


@pytest.mark.parametrize(("model", "name"), [
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("openai/gpt-oss-20b", "gpt-oss-20b"),
    ("moonshotai/Kimi-K2.5", "kimi-k2.5"),
    ("MiniMaxAI/MiniMax-M2.5", "minimax-m2.5"),
    ("zai-org/GLM-4.7", "glm-4.7"),
    ("Qwen/Qwen3.5-397B-A17B", "qwen3.5-397b-a17b"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
    # Not in the table: the repository name, lower-cased, without checkpoint suffixes.
    ("zai-org/GLM-4.7-FP8", "glm-4.7"),
    ("google/gemma-3-27b-it", "gemma-3-27b"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("Qwen/Qwen3-32B-FP8", "qwen3-32b"),
    ("qwen3-30b-a3b", "qwen3-30b-a3b"),  # a library name as it is
    ("moonshotai/Kimi-K2-Instruct", None),  # not Kimi-K2.5
    ("acme/Unknown-7B-Instruct", None),
])
def test_model_ids_map_to_the_library(model: str, name: str | None) -> None:
    assert library_model(model) == name


def test_every_mapped_id_names_a_library_model() -> None:
    assert set(MODELS.values()) <= set(library_model_names())


@pytest.mark.parametrize(("system", "profile"), [
    ("h100_sxm", "h100-sxm"), ("h200_sxm", "h200-sxm"), ("b200_sxm", "b200"),
    ("b300_sxm", "b300"), ("gb200", "gb200"), ("gb300", "gb300"),
    ("b200", "b200"), ("GB300_NVL72", "gb300"), ("h100-sxm", "h100-sxm"),  # names, aliases
    ("mi355x", None), ("tpu_v5", None),
])
def test_systems_map_to_gpu_profiles(system: str, profile: str | None) -> None:
    assert gpu_profile(system) == profile
    assert profile is None or profile in list_gpu_profiles()


@pytest.mark.parametrize(("mode", "dtype"), [
    ("", "bf16"), ("fp8", "fp8"), ("fp8_block", "fp8"), ("nvfp4", "nvfp4"), ("fp4", "nvfp4"),
    ("mxfp4", "mxfp4"), ("w4a8", None), ("w4a16", None), ("int4_awq", None),
    # The publisher's own names (aiconfigurator GEMMQuantMode / MoEQuantMode).
    ("bfloat16", "bf16"), ("fp8_static", "fp8"), ("sq", "int8"), ("int4_wo", "int4"),
    ("w4a16_mxfp4", "mxfp4"), ("w4a16_mxfp4_cutlass", "mxfp4"),
    # Activations in another format than the weights' rate: not modelled.
    ("w4afp8", None), ("w4a8_mxfp4_mxfp8", None), ("nvfp4_wo", None), ("int8_wo", None),
])
def test_gemm_quantisation_maps_to_a_weight_dtype(mode: str, dtype: str | None) -> None:
    assert weight_dtype(mode) == dtype


@pytest.mark.parametrize(("degrees", "layout"), [
    # (tp, pp, attention dp, moe tp, moe ep)
    ((8, 1, 1, None, 1), Layout(8)),
    ((8, 1, 1, 8, 1), Layout(8)),  # every expert split over the 8 GPUs
    ((8, 1, 1, 1, 8), Layout(8, 8)),  # whole experts on each GPU
    ((8, 1, 1, 4, 2), Layout(8, 2)),  # each expert split over TP / EP = 4
    ((1, 1, 8, 1, 8), Layout(8, 8, True)),  # attention DP over the 8 GPUs
    ((1, 1, 8, None, 8), Layout(8, 8, True)),
    ((4, 2, 1, None, 1), Layout(4)),
])
def test_layouts_in_batchsims_terms(degrees: tuple[int, int, int, int | None, int],
                                    layout: Layout) -> None:
    assert replay_layout("deepseek-v3", *degrees) == layout


@pytest.mark.parametrize(("model", "degrees", "reason"), [
    ("deepseek-v3", (8, 1, 8, 1, 8), "attention_dp_size 8 with tp_size 8"),
    ("deepseek-v3", (1, 1, 8, 8, 1), "moe_ep_size 1 with attention_dp_size 8"),
    ("deepseek-v3", (8, 1, 1, 2, 2), "moe_tp_size 2 × moe_ep_size 2 is not the 8 GPU(s)"),
    ("deepseek-v3", (8, 1, 1, 1, 1), "moe_tp_size 1 × moe_ep_size 1 is not the 8 GPU(s)"),
    ("deepseek-v3", (4, 1, 1, None, 8), "moe_ep_size 8 does not divide the 4 GPU(s)"),
    ("qwen3-30b-a3b", (2, 2, 1, 1, 2), "not modelled with pipeline parallelism"),
    ("qwen3-32b", (2, 1, 1, 1, 2), "expert parallelism needs a mixture-of-experts model"),
    ("qwen3-32b", (1, 1, 2, None, 1), "data-parallel attention needs a mixture-of-experts"),
    ("qwen3-32b", (8, 1, 1, 4, 1), "moe_tp_size 4: qwen3-32b is dense"),
])
def test_layouts_batchsim_cannot_express_are_refused(
        model: str, degrees: tuple[int, int, int, int | None, int], reason: str) -> None:
    refused = replay_layout(model, *degrees)
    assert isinstance(refused, str) and reason in refused


def test_a_dense_row_ignores_the_unused_moe_degrees() -> None:
    """The tables write moe_tp_size = moe_ep_size = 1 (or 0) for a dense model at any TP."""
    assert replay_layout("qwen3-32b", 8, 1, 1, 1, 1) == Layout(8)


def test_a_tp_only_case_sets_no_new_keys(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, model_path="Qwen/Qwen3-32B", gemm_quant_mode="",
                             tp_size="4", moe_tp_size="0", moe_ep_size="0")
    assert isinstance(experiment, dict)
    assert experiment["tensor_parallel"] == 4
    assert "expert_parallel" not in experiment and "data_parallel_attention" not in experiment


def test_an_expert_parallel_case_is_its_experiments_keys(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, moe_tp_size="1", moe_ep_size="8")
    assert isinstance(experiment, dict)
    assert (experiment["model"], experiment["hardware"]) == ("deepseek-v3", "h200-sxm")
    assert (experiment["tensor_parallel"], experiment["expert_parallel"]) == (8, 8)
    assert "data_parallel_attention" not in experiment
    check_before_run(load_experiment(experiment), tmp_path)  # run's checks pass


def test_a_data_parallel_attention_case_on_blackwell_in_fp4(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, model_path="moonshotai/Kimi-K2.5", system="gb300",
                             gemm_quant_mode="nvfp4", tp_size="1", attention_dp_size="8",
                             moe_tp_size="1", moe_ep_size="8", batch_size="64")
    assert isinstance(experiment, dict)
    assert (experiment["model"], experiment["hardware"]) == ("kimi-k2.5", "gb300")
    assert experiment["dtype"] == {"weights": "nvfp4", "kv_cache": "bf16"}
    assert experiment["tensor_parallel"] == experiment["expert_parallel"] == 8
    assert experiment["data_parallel_attention"] is True
    check_before_run(load_experiment(experiment), tmp_path)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"system": "mi355x"}, "GPU 'mi355x' has no profile"),
    ({"gemm_quant_mode": "w4a8"}, "GEMM quantisation 'w4a8' is not modelled"),
    ({"model_path": "acme/Unknown-7B"}, "model 'acme/Unknown-7B' is not in the model library"),
    ({"attention_dp_size": "8", "moe_ep_size": "8"}, "attention_dp_size 8 with tp_size 8"),
    ({"moe_tp_size": "2", "moe_ep_size": "2"}, "batchsim splits each expert over 4 GPU(s)"),
    ({"moe_ep_size": "x"}, "moe_ep_size: expected a positive number or nothing, got 'x'"),
    ({"attention_dp_size": "1.5"}, "attention_dp_size: expected a whole number"),
    ({"mode": "disagg"}, "disaggregated rows are not replayed yet"),
    ({"moe_quant_mode": "w4a8_mxfp4_mxfp8"}, "expert quantisation 'w4a8_mxfp4_mxfp8' "
                                             "(moe_quant_mode) is not modelled"),
])
def test_a_refused_case_says_why(tmp_path: Path, changes: dict[str, str], reason: str) -> None:
    refused = _experiment(tmp_path, **changes)
    assert isinstance(refused, str) and reason in refused


@pytest.mark.parametrize(("changes", "weights", "experts"), [
    ({"moe_quant_mode": "fp8_block"}, "fp8", None),  # the experts' fp8 flavour: the same format
    # Experts quantised apart from the GEMMs run in their own format (`dtype.experts`).
    ({"moe_quant_mode": "nvfp4"}, "fp8", "nvfp4"),
    # gpt-oss as its publisher names it: bf16 GEMMs, MXFP4 experts with bf16 activations.
    ({"gemm_quant_mode": "bfloat16", "moe_quant_mode": "w4a16_mxfp4"}, "bf16", "mxfp4"),
    ({"gemm_quant_mode": "fp8_static", "moe_quant_mode": "int4_wo"}, "fp8", "int4"),
    # The tables fill `moe_quant_mode` for dense models too, where it means nothing.
    ({"model_path": "meta-llama/Llama-3.1-8B-Instruct", "gemm_quant_mode": "",
      "moe_quant_mode": "fp8", "tp_size": "1"}, "bf16", None),
])
def test_an_expert_quantisation_the_model_runs_is_replayed(
        tmp_path: Path, changes: dict[str, str], weights: str, experts: str | None) -> None:
    experiment = _experiment(tmp_path, **changes)
    assert isinstance(experiment, dict), experiment
    assert experiment["dtype"]["weights"] == weights
    assert experiment["dtype"].get("experts") == experts


@pytest.mark.parametrize(("backend", "running"), [("vllm", 32), ("sglang", 32), ("trtllm", 31)])
def test_the_engine_runs_the_rows_batch_size_less_its_reserved_slots(
        tmp_path: Path, backend: str, running: int) -> None:
    experiment = _experiment(tmp_path, backend=backend, model_path="Qwen/Qwen3-32B",
                             gemm_quant_mode="", tp_size="4", batch_size="32")
    assert isinstance(experiment, dict)
    [arm] = experiment["policies"]
    assert arm["max_num_seqs"] == running


def test_a_data_parallel_attention_row_keeps_the_engines_default_batch(tmp_path: Path) -> None:
    # Its batch_size counts the users of every rank; one rank's max batch is not given.
    experiment = _experiment(tmp_path, tp_size="1", attention_dp_size="8", moe_tp_size="1",
                             moe_ep_size="8", batch_size="64")
    assert isinstance(experiment, dict)
    [arm] = experiment["policies"]
    scheduler = load_engine_profile("sglang").spec.scheduler
    assert scheduler is not None and arm["max_num_seqs"] == scheduler.max_num_seqs


def _arm(tmp_path: Path, **changes: str) -> dict[str, Any]:
    experiment = _experiment(tmp_path, model_path="Qwen/Qwen3-32B", gemm_quant_mode="",
                             tp_size="4", batch_size="32", **changes)
    assert isinstance(experiment, dict)
    [arm] = experiment["policies"]
    return arm


def test_a_tensorrt_llm_row_runs_the_tables_launch_budget(tmp_path: Path) -> None:
    # max_num_tokens = batch size + prompt + 1,500, chunked context off.
    arm = _arm(tmp_path, backend="trtllm", backend_version="1.0.0rc3", isl="1024")
    assert arm["kind"] == "continuous"
    assert arm["max_num_batched_tokens"] == 32 + 1024 + 1500


@pytest.mark.parametrize(("isl", "budget"), [("1024", 1024 + 1500), ("8000", 8192)])
def test_a_later_sglang_row_runs_mixed_chunks_under_the_prefill_budget(
        tmp_path: Path, isl: str, budget: int) -> None:
    # --max-prefill-tokens prompt + 1,500, capped by the 8,192-token chunk; --enable-mixed-chunk.
    arm = _arm(tmp_path, backend="sglang", backend_version="0.5.6.post2", isl=isl)
    assert (arm["token_budget"], arm["mixed_prefill"]) == (budget, True)


@pytest.mark.parametrize(("isl", "budget"), [("1024", 32 + 1024 + 1500), ("8000", 8192)])
def test_a_vllm_row_runs_the_tables_launch_budget(tmp_path: Path, isl: str,
                                                  budget: int) -> None:
    # --max-num-batched-tokens = batch size + prompt + 1,500, capped by the profile's 8,192.
    arm = _arm(tmp_path, backend="vllm", backend_version="0.12.0", isl=isl)
    assert (arm["token_budget"], arm["mixed_prefill"]) == (budget, True)


@pytest.mark.parametrize(("backend", "version"), [
    ("sglang", "0.5.1.post1"), ("sglang", "")])
def test_other_rows_run_the_engine_profiles_budget(tmp_path: Path, backend: str,
                                                   version: str) -> None:
    scheduler = load_engine_profile(backend).spec.scheduler
    assert scheduler is not None
    arm = _arm(tmp_path, backend=backend, backend_version=version)
    assert (arm["token_budget"], arm["mixed_prefill"]) == (scheduler.token_budget,
                                                           scheduler.mixed_prefill)
