"""The experiment models: defaults, constraints and the cross-field rules."""

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from batchsim.experiment.reference_doc import _documented_models
from batchsim.experiment.schema import (
    ContinuousArm,
    DTypeConfig,
    Experiment,
    FixedComponent,
    GeometricLength,
    KVCacheConfig,
    MixtureLength,
    OutputConfig,
    PoissonArrivals,
    SLOConfig,
    StaticArm,
    UniformComponent,
)


def test_minimal_experiment_fills_in_the_documented_defaults(minimal_data: dict[str, Any]) -> None:
    exp = Experiment.model_validate(minimal_data)

    assert exp.seed == 0
    assert exp.tensor_parallel == 1
    assert exp.dtype == DTypeConfig(weights="bf16", kv_cache="bf16")
    assert exp.gpu_memory_utilization == 0.9
    assert exp.max_model_len is None
    assert exp.kv_cache == KVCacheConfig(block_size=16, num_blocks=None, swap_space_gb=4.0)
    assert exp.replicas == 1
    assert exp.router == "round_robin"
    assert exp.warmup_s == 0.0 and exp.cooldown_s == 0.0
    assert exp.slo == SLOConfig(ttft_p99_s=None, tpot_p99_s=None, e2e_p99_s=None)
    assert exp.output == OutputConfig(dir=None, timeseries_bin_s=1.0)
    assert exp.output_dir.as_posix() == "results/minimal"


def test_arms_and_distributions_parse_into_their_kind(minimal_data: dict[str, Any]) -> None:
    exp = Experiment.model_validate(minimal_data)

    static, continuous = exp.policies
    assert static == StaticArm(name="static-8", max_batch_size=8)
    assert (static.max_wait_s, static.max_output_tokens) == (0.0, 2048)
    assert continuous == ContinuousArm(name="vllm")
    assert continuous.max_num_seqs == 256
    assert continuous.max_num_batched_tokens is None
    assert continuous.preemption == "recompute"
    assert exp.workload.arrivals == PoissonArrivals(rate=4.0)
    assert exp.workload.output_tokens == GeometricLength(mean=64)


def test_mixture_components_are_length_distributions_with_a_weight() -> None:
    mixture = MixtureLength.model_validate(
        {
            "kind": "mixture",
            "components": [
                {"weight": 0.9, "kind": "uniform", "low": 32, "high": 128},
                {"weight": 0.1, "kind": "fixed", "value": 2048},
            ],
        }
    )
    assert mixture.components == [
        UniformComponent(weight=0.9, low=32, high=128),
        FixedComponent(weight=0.1, value=2048),
    ]


def test_mixture_of_mixtures_is_rejected() -> None:
    with pytest.raises(ValidationError):
        MixtureLength.model_validate(
            {"components": [{"weight": 1, "kind": "mixture", "components": []}]}
        )


def test_models_are_immutable(minimal_data: dict[str, Any]) -> None:
    exp = Experiment.model_validate(minimal_data)
    with pytest.raises(ValidationError):
        exp.seed = 3


@pytest.mark.parametrize("model", _documented_models(Experiment), ids=lambda m: m.__name__)
def test_every_model_forbids_unknown_keys_and_documents_every_field(
    model: type[BaseModel],
) -> None:
    assert model.model_config.get("extra") == "forbid"
    assert model.model_config.get("frozen") is True
    undocumented = [name for name, field in model.model_fields.items() if not field.description]
    assert undocumented == []


def _with(data: dict[str, Any], **workload: Any) -> dict[str, Any]:
    data["workload"] = {k: v for k, v in {**data["workload"], **workload}.items() if v != "-"}
    return data


def test_trace_arrivals_need_no_lengths_nor_limits(minimal_data: dict[str, Any]) -> None:
    trace = {"kind": "trace", "path": "trace.csv"}
    data = _with(minimal_data, arrivals=trace, prompt_tokens="-", output_tokens="-")
    data["workload"].pop("num_requests")

    exp = Experiment.model_validate(data)

    assert exp.workload.arrivals.kind == "trace"
    assert exp.workload.arrivals.format == "azure2023"
    assert exp.workload.arrivals.time_scale == 1.0


def test_trace_arrivals_accept_both_limits(minimal_data: dict[str, Any]) -> None:
    trace = {"kind": "trace", "path": "trace.csv"}
    data = _with(minimal_data, arrivals=trace, prompt_tokens="-", output_tokens="-")
    data["workload"]["duration_s"] = 60.0

    exp = Experiment.model_validate(data)

    assert (exp.workload.duration_s, exp.workload.num_requests) == (60.0, 100)


def test_closed_loop_arrivals(minimal_data: dict[str, Any]) -> None:
    arrivals = {"kind": "closed_loop", "concurrency": 16}
    exp = Experiment.model_validate(_with(minimal_data, arrivals=arrivals))
    assert exp.workload.arrivals.kind == "closed_loop"
    assert exp.workload.arrivals.think_time_s == 0.0
