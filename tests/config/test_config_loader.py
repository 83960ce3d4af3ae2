"""Loading experiment files: round trip, and one clear line per problem, never a traceback."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchsim.experiment.loader import ConfigError, dump_resolved, load_experiment
from batchsim.experiment.schema import Experiment

WriteYaml = Callable[[str | dict[str, Any]], Path]


def problems(path: Path, overrides: tuple[str, ...] = ()) -> list[str]:
    """The lines of the ConfigError that loading ``path`` raises."""
    with pytest.raises(ConfigError) as caught:
        load_experiment(path, overrides)
    message = str(caught.value)
    assert "Traceback" not in message
    error = caught.value
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    return message.splitlines()


def only_problem(path: Path) -> str:
    [line] = problems(path)
    assert line.startswith(f"{path}: ")
    return line.removeprefix(f"{path}: ")


# --- valid files -----------------------------------------------------------------------------


def test_load_returns_the_experiment_and_the_files_folder(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "name: minimal\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
        "workload:\n  arrivals: {kind: poisson, rate: 4}\n"
        "  prompt_tokens: {kind: fixed, value: 8}\n  output_tokens: {kind: fixed, value: 8}\n"
        "  duration_s: 10\npolicies: [{name: a, kind: continuous}]\n"
    )
    exp, base_dir = load_experiment(path)
    assert exp.name == "minimal"
    assert exp.workload.arrivals.rate == 4.0  # type: ignore[union-attr]
    assert base_dir == path.parent.resolve()


def test_resolved_dump_round_trips(write_yaml: WriteYaml, minimal_data: dict[str, Any]) -> None:
    minimal_data["workload"]["output_tokens"] = {
        "kind": "mixture",
        "components": [
            {"weight": 0.9, "kind": "uniform", "low": 32, "high": 128},
            {"weight": 0.1, "kind": "fixed", "value": 2048},
        ],
    }
    exp, _ = load_experiment(write_yaml(minimal_data))

    dumped = dump_resolved(exp)
    again, _ = load_experiment(write_yaml(dumped))

    assert again == exp
    resolved = yaml.safe_load(dumped)
    assert resolved["dtype"] == {"weights": "bf16", "experts": None, "kv_cache": "bf16"}
    assert resolved["policies"][1]["max_num_seqs"] == 256
    assert list(resolved) == list(Experiment.model_fields)


# --- file-level problems ---------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert problems(path) == [f"{path}: file not found"]


def test_unreadable_yaml_gives_line_and_column(write_yaml: WriteYaml) -> None:
    path = write_yaml("name: x\nworkload: {arrivals: [\n")
    [line] = problems(path)
    assert line.startswith(f"{path}: invalid YAML at line ")
    assert "column" in line


def test_duplicate_yaml_keys_are_errors(write_yaml: WriteYaml) -> None:
    path = write_yaml("name: x\nseed: 1\nseed: 2\n")
    [line] = problems(path)
    assert "line 3, column 1: duplicate key 'seed'" in line


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_top_level_must_be_a_mapping(write_yaml: WriteYaml, text: str) -> None:
    path = write_yaml(text)
    [line] = problems(path)
    assert line.startswith(f"{path}: the top level must be a mapping")


# --- schema problems, one line each ----------------------------------------------------------


def test_unknown_key_lists_the_valid_keys(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["workload"]["arivals"] = minimal_data["workload"].pop("arrivals")
    lines = problems(write_yaml(minimal_data))
    path = write_yaml(minimal_data)
    assert lines == [
        f"{path}: workload.arivals: unknown key (expected one of: arrivals, prompt_tokens, "
        "output_tokens, lengths, duration_s, num_requests, tenants); did you mean 'arrivals'?"
    ]


def test_a_sweep_names_its_parameter_and_values(write_yaml: WriteYaml,
                                                 minimal_data: dict) -> None:
    minimal_data["sweep"] = {"parameter": "workload.arrivals.rate", "values": []}
    assert only_problem(write_yaml(minimal_data)).startswith("sweep.0.values: ")
    minimal_data["sweep"] = 3
    assert only_problem(write_yaml(minimal_data)).startswith("sweep: expected a list")


def test_replications_must_be_positive(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["replications"] = 0
    assert only_problem(write_yaml(minimal_data)).startswith("replications: ")


def test_unknown_key_inside_an_arm(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["policies"][1]["max_num_seq"] = 64
    assert only_problem(write_yaml(minimal_data)) == (
        "policies.1.max_num_seq: unknown key (expected one of: name, kind, max_num_seqs, "
        "max_num_batched_tokens, preemption, admission, admission_reserve, prefix_caching, "
        "kv_tiers, kv_allocation, ordering, deployment, speculative, autoscaler, "
        "preemption_victim, gateway); did you mean 'max_num_seqs'?"
    )


def test_wrong_type(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["policies"][0]["max_batch_size"] = "lots"
    assert only_problem(write_yaml(minimal_data)) == (
        "policies.0.max_batch_size: expected an integer (got 'lots')"
    )


def test_negative_rate_names_the_key_without_the_kind_tag(
    write_yaml: WriteYaml, minimal_data: dict
) -> None:
    minimal_data["workload"]["arrivals"]["rate"] = -1.5
    assert only_problem(write_yaml(minimal_data)) == (
        "workload.arrivals.rate: expected a value > 0 (got -1.5)"
    )


def test_nested_tags_are_removed_too(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["workload"]["prompt_tokens"] = {
        "kind": "mixture",
        "components": [{"weight": 1, "kind": "uniform", "low": 0, "high": 4}],
    }
    assert only_problem(write_yaml(minimal_data)) == (
        "workload.prompt_tokens.components.0.low: expected a value >= 1 (got 0)"
    )


def test_bad_literal_lists_the_choices(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["dtype"] = {"weights": "fp16"}
    assert only_problem(write_yaml(minimal_data)) == (
        "dtype.weights: expected one of: bf16, fp8, int8, int4, nvfp4, mxfp4 (got 'fp16')"
    )


@pytest.mark.parametrize(
    ("section", "kind", "valid"),
    [
        ("policies", "teleport", "static, continuous, chunked_prefill, disaggregated"),
        ("arrivals", "bursty",
         "poisson, gamma, constant, trace, closed_loop, weibull, rate_curve, diurnal, sessions"),
    ],
)
def test_bad_kind_lists_the_valid_kinds(
    write_yaml: WriteYaml, minimal_data: dict, section: str, kind: str, valid: str
) -> None:
    if section == "policies":
        minimal_data["policies"].append({"name": "new", "kind": kind})
        key = "policies.2.kind"
    else:
        minimal_data["workload"]["arrivals"] = {"kind": kind, "rate": 1}
        key = "workload.arrivals.kind"
    assert only_problem(write_yaml(minimal_data)) == (
        f"{key}: expected one of: {valid} (got {kind!r})"
    )


def test_missing_kind_lists_the_valid_kinds(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["policies"][0].pop("kind")
    assert only_problem(write_yaml(minimal_data)) == (
        "policies.0.kind: expected one of: static, continuous, chunked_prefill, "
        "disaggregated"
    )


def test_duplicate_arm_names_name_the_duplicate(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["policies"].append({"name": "vllm", "kind": "continuous", "max_num_seqs": 8})
    assert only_problem(write_yaml(minimal_data)) == (
        "policies.2.name: duplicate arm name 'vllm' (already used by policies.1)"
    )


def test_no_arms(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["policies"] = []
    assert only_problem(write_yaml(minimal_data)) == (
        "policies: expected at least 1 item(s) (got [])"
    )


def test_trace_with_prompt_tokens(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["workload"]["arrivals"] = {"kind": "trace", "path": "t.csv"}
    del minimal_data["workload"]["output_tokens"]
    assert only_problem(write_yaml(minimal_data)) == (
        "workload.prompt_tokens: not allowed with trace arrivals, lengths come from the trace"
    )


def test_lengths_required_without_a_trace(write_yaml: WriteYaml, minimal_data: dict) -> None:
    del minimal_data["workload"]["output_tokens"]
    assert only_problem(write_yaml(minimal_data)) == (
        "workload.output_tokens: required with poisson arrivals"
    )


def test_neither_duration_nor_count(write_yaml: WriteYaml, minimal_data: dict) -> None:
    del minimal_data["workload"]["num_requests"]
    assert only_problem(write_yaml(minimal_data)) == (
        "workload: give exactly one of duration_s or num_requests (got neither)"
    )


def test_both_duration_and_count(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["workload"]["duration_s"] = 60
    assert only_problem(write_yaml(minimal_data)) == (
        "workload: give exactly one of duration_s or num_requests (got both)"
    )


def test_uniform_high_below_low(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["workload"]["prompt_tokens"] = {"kind": "uniform", "low": 10, "high": 5}
    assert only_problem(write_yaml(minimal_data)) == (
        "workload.prompt_tokens.high: must be >= low (got high=5, low=10)"
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("gpu_memory_utilization", 1.5, "gpu_memory_utilization: expected a value <= 1 (got 1.5)"),
        ("gpu_memory_utilization", 0, "gpu_memory_utilization: expected a value > 0 (got 0)"),
        ("max_model_len", 1, "max_model_len: expected a value >= 2 (got 1)"),
        ("seed", -1, "seed: expected a value >= 0 (got -1)"),
        ("warmup_s", float("inf"), "warmup_s: expected a finite number (got inf)"),
        ("name", "", "name: expected a non-empty string (got '')"),
        ("dtype", "fp8", "dtype: expected a mapping (got 'fp8')"),
    ],
)
def test_top_level_constraints(
    write_yaml: WriteYaml, minimal_data: dict, key: str, value: Any, expected: str
) -> None:
    minimal_data[key] = value
    assert only_problem(write_yaml(minimal_data)) == expected


def test_several_problems_one_line_each(write_yaml: WriteYaml, minimal_data: dict) -> None:
    minimal_data["seed"] = -1
    minimal_data["workload"]["arrivals"]["rate"] = 0
    minimal_data["policies"][1]["preemption"] = "drop"
    path = write_yaml(minimal_data)
    assert problems(path) == [
        f"{path}: seed: expected a value >= 0 (got -1)",
        f"{path}: workload.arrivals.rate: expected a value > 0 (got 0)",
        f"{path}: policies.1.preemption: expected one of: recompute, swap (got 'drop')",
    ]
