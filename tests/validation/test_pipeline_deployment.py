"""Pipeline parallelism wired through an experiment: PP = 1 unchanged, PP > 1 runs, bad degrees
are reported under their key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from batchsim.experiment.deployment import resolve_deployment
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.outputs import write_results
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.model_spec import ModelError
from batchsim.gpu.pipeline_cost import PipelineCostModel
from tests.validation.experiment_builder import base_experiment, run_dict


def _workload() -> dict[str, object]:
    return {
        "arrivals": {"kind": "poisson", "rate": 8.0},
        "prompt_tokens": {"kind": "uniform", "low": 64, "high": 2048},
        "output_tokens": {"kind": "uniform", "low": 8, "high": 256},
        "num_requests": 200,
    }


def _summary_bytes(tmp_path: Path, folder: str, **keys: object) -> bytes:
    exp = base_experiment(workload=_workload(), tensor_parallel=2, **keys)
    (tmp_path / folder).mkdir()
    result = run_dict(tmp_path / folder, exp)
    write_results(result, tmp_path / folder / "out")
    return (tmp_path / folder / "out" / "summary.json").read_bytes()


def test_pipeline_parallel_1_is_the_existing_path_byte_for_byte(tmp_path: Path) -> None:
    plain = _summary_bytes(tmp_path, "plain")
    explicit = _summary_bytes(tmp_path, "explicit", pipeline_parallel=1)
    assert explicit == plain


def test_two_stages_run_and_report_their_layout(tmp_path: Path) -> None:
    arms = [{"name": "tp2", "kind": "chunked_prefill"},
            {"name": "tp1-pp2", "kind": "chunked_prefill",
             "deployment": {"tensor_parallel": 1, "pipeline_parallel": 2}}]
    result = run_dict(tmp_path, base_experiment(workload=_workload(), tensor_parallel=2,
                                                policies=arms))
    tp, pp = (arm.metrics for arm in result.arms)
    assert pp["gpus"] == tp["gpus"] == 2
    layout = pp["deployment"]
    assert isinstance(layout, dict)
    assert (layout["tensor_parallel"], layout["pipeline_parallel"]) == (1, 2)
    assert "(TP1 x PP2, last stage)" in str(layout["memory"])
    assert pp["completed"] == tp["completed"] == 200
    # A 8B model on H100s: the all-reduce TP pays is cheap, the pipeline's bubble is not.
    assert pp["tpot_s"]["p50"] > tp["tpot_s"]["p50"]  # type: ignore[index]


def test_the_deployment_builds_the_pipelined_model_only_for_several_stages(
        tmp_path: Path) -> None:
    def deployment(**keys: object) -> object:
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(base_experiment(**keys)), encoding="utf-8")
        exp, base_dir = load_experiment(path)
        return resolve_deployment(exp, base_dir).cost_model

    assert type(deployment()) is RooflineCostModel
    pipelined = deployment(pipeline_parallel=4)
    assert isinstance(pipelined, PipelineCostModel)
    assert pipelined.pipeline_parallel == 4


def test_a_degree_that_does_not_divide_the_layers_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"^pipeline_parallel: llama-3\.1-8b has 32 layers, "
                                         r"which pipeline_parallel=3 does not divide"):
        run_dict(tmp_path, base_experiment(pipeline_parallel=3))
    with pytest.raises(ModelError, match=r"pipeline_parallel=64 asks for more stages than "
                                         r"llama-3\.1-8b's 32 layers"):
        run_dict(tmp_path, base_experiment(pipeline_parallel=64))
    arms = [{"name": "bad", "kind": "continuous", "deployment": {"pipeline_parallel": 5}}]
    with pytest.raises(ValueError, match=r"^policies\.0\.deployment: pipeline_parallel: "
                                         r".*32 layers"):
        run_dict(tmp_path, base_experiment(policies=arms))
