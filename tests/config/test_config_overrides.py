"""``--set dotted.key=value`` overrides applied to the raw YAML data before validation."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchsim.experiment.loader import ConfigError, apply_overrides, load_experiment
from batchsim.experiment.schema import ContinuousArm, FixedLength

WriteYaml = Callable[[str | dict[str, Any]], Path]


def test_values_are_parsed_as_yaml(minimal_data: dict[str, Any]) -> None:
    data = apply_overrides(
        minimal_data,
        [
            "seed=12",
            "gpu_memory_utilization=0.5",
            "workload.output_tokens={kind: fixed, value: 8}",
            "name=renamed",
        ],
    )
    assert data["seed"] == 12
    assert data["gpu_memory_utilization"] == 0.5
    assert data["workload"]["output_tokens"] == {"kind": "fixed", "value": 8}
    assert data["name"] == "renamed"


def test_list_and_bool_values(minimal_data: dict[str, Any]) -> None:
    data = apply_overrides(minimal_data, ["extra=[1, 2]", "flag=true"])
    assert data["extra"] == [1, 2]
    assert data["flag"] is True


def test_input_is_not_modified(minimal_data: dict[str, Any]) -> None:
    apply_overrides(minimal_data, ["workload.arrivals.rate=99", "policies.0.name=x"])
    assert minimal_data["workload"]["arrivals"]["rate"] == 4.0
    assert minimal_data["policies"][0]["name"] == "static-8"


def test_later_overrides_win(minimal_data: dict[str, Any]) -> None:
    assert apply_overrides(minimal_data, ["seed=1", "seed=2"])["seed"] == 2


def test_arm_by_index_and_by_name(minimal_data: dict[str, Any]) -> None:
    data = apply_overrides(
        minimal_data, ["policies.0.max_batch_size=16", "policies.vllm.max_num_seqs=128"]
    )
    assert data["policies"][0]["max_batch_size"] == 16
    assert data["policies"][1]["max_num_seqs"] == 128


def test_whole_list_item_can_be_replaced(minimal_data: dict[str, Any]) -> None:
    data = apply_overrides(minimal_data, ["policies.vllm={name: v2, kind: continuous}"])
    assert data["policies"][1] == {"name": "v2", "kind": "continuous"}


def test_new_keys_and_missing_sections_are_created(minimal_data: dict[str, Any]) -> None:
    minimal_data["output"] = None  # `output:` left empty in the file
    data = apply_overrides(minimal_data, ["slo.ttft_p99_s=2.5", "output.dir=out"])
    assert data["slo"] == {"ttft_p99_s": 2.5}
    assert data["output"] == {"dir": "out"}


def test_overrides_reach_the_validated_experiment(
    write_yaml: WriteYaml, minimal_data: dict[str, Any]
) -> None:
    exp, _ = load_experiment(
        write_yaml(minimal_data),
        ["policies.vllm.max_num_seqs=64", "workload.prompt_tokens={kind: fixed, value: 8}"],
    )
    assert exp.policies[1] == ContinuousArm(name="vllm", max_num_seqs=64)
    assert exp.workload.prompt_tokens == FixedLength(value=8)


def test_an_unknown_key_set_by_an_override_is_named(
    write_yaml: WriteYaml, minimal_data: dict[str, Any]
) -> None:
    path = write_yaml(minimal_data)
    with pytest.raises(ConfigError) as caught:
        load_experiment(path, ["policies.vllm.max_seqs=64"])
    assert str(caught.value).startswith(f"{path}: policies.1.max_seqs: unknown key")


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("seed", "expected dotted.key=value"),
        ("=3", "expected dotted.key=value"),
        ("workload..rate=3", "empty part in key 'workload..rate'"),
        ("name.first=x", "name is 'minimal', not a mapping or a list"),
        (
            "workload.arrivals.rate.value=1",
            "workload.arrivals.rate is 4.0, not a mapping or a list",
        ),
        ("policies.5.max_num_seqs=1", "index 5 out of range (policies has 2 items)"),
        (
            "policies.sarathi.token_budget=1",
            "no item named 'sarathi' in policies (names: static-8, vllm)",
        ),
        ("seed=[1, 2", "value is not valid YAML"),
    ],
)
def test_bad_overrides_name_the_override_as_typed(
    minimal_data: dict[str, Any], override: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        apply_overrides(minimal_data, [override])
    assert str(caught.value).startswith(f"--set {override}: {reason}")
