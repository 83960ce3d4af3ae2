"""An arm's `autoscaler`: bad bounds, targets and combinations refused in one line naming the
key, by `validate` as by `run` (the schema refuses them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.experiment.deployment_size import arm_experiment
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.pool_scaling import pool_slots
from batchsim.experiment.schema import DisaggregatedArm


def _scaled(**keys: Any) -> dict[str, Any]:
    return {"name": "auto", "kind": "continuous", "autoscaler": keys}


@pytest.mark.parametrize(("arm", "key", "words"), [
    (_scaled(min_replicas=3, max_replicas=2), "policies.0.autoscaler.min_replicas",
     "must be <= max_replicas"),
    (_scaled(min_replicas=1, max_replicas=3, initial_replicas=4),
     "policies.0.autoscaler.initial_replicas", "must lie in [min_replicas, max_replicas]"),
    (_scaled(metric="utilization", target=1.5), "policies.0.autoscaler.target",
     "busy fraction in (0, 1]"),
    (_scaled(interval_s=0), "policies.0.autoscaler.interval_s", "expected a value > 0"),
    (_scaled(metric="queue"), "policies.0.autoscaler.metric", "outstanding"),
    ({**_scaled(), "deployment": {"replicas": 4}}, "policies.0.deployment.replicas",
     "remove deployment.replicas"),
    # A disaggregated arm scales each pool on its own (docs/how-to/autoscaling.md).
    ({"name": "pd", "kind": "disaggregated", "autoscaler": {"max_replicas": 3}},
     "policies.0.autoscaler.max_replicas", "expected one of: prefill, decode"),
    ({"name": "pd", "kind": "disaggregated", "prefill_replicas": 2, "autoscaler": {}},
     "policies.0.prefill_replicas", "remove prefill_replicas"),
    ({"name": "pd", "kind": "disaggregated", "autoscaler": {"decode": {"min_replicas": 0}}},
     "policies.0.autoscaler.decode.min_replicas", "expected a value >= 1"),
    ({"name": "pd", "kind": "disaggregated",
      "autoscaler": {"prefill": {"min_replicas": 3, "max_replicas": 2}}},
     "policies.0.autoscaler.prefill.min_replicas", "must be <= max_replicas"),
    ({"name": "pd", "kind": "disaggregated", "autoscaler": {"prefill": {"metric": "itl"}}},
     "policies.0.autoscaler.prefill.metric", "ttft"),
    ({"name": "pd", "kind": "disaggregated",
      "autoscaler": {"decode": {"metric": "kv_utilization", "target": 2}}},
     "policies.0.autoscaler.decode.target", "fraction in (0, 1]"),
])
def test_bad_autoscalers_are_refused_naming_the_key(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path],
        arm: dict[str, Any], key: str, words: str) -> None:
    minimal_data["policies"] = [arm]
    with pytest.raises(ConfigError) as refused:
        load_experiment(write_yaml(minimal_data))
    line = str(refused.value)
    assert "\n" not in line and key in line and words in line, line


def test_validate_refuses_it_in_one_line(minimal_data: dict[str, Any],
                                         write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["policies"] = [_scaled(min_replicas=3, max_replicas=2)]
    done = CliRunner().invoke(app, ["validate", str(write_yaml(minimal_data))])
    assert done.exit_code == 2, done.output
    assert "autoscaler.min_replicas: must be <= max_replicas" in done.output
    assert "Traceback" not in done.output


def test_the_pool_has_a_slot_for_each_replica_it_may_run(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["policies"] = [_scaled(min_replicas=0, max_replicas=5)]
    exp, _ = load_experiment(write_yaml(minimal_data))
    arm = exp.policies[0]
    assert arm_experiment(exp, arm).replicas == 5
    assert arm.autoscaler is not None and arm.autoscaler.start_replicas == 0


def test_the_weighted_router_routes_an_autoscaled_pool(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["router"] = {"kind": "weighted", "scorers": [{"kind": "queue_depth"}]}
    minimal_data["policies"] = [_scaled(max_replicas=3)]
    exp, _ = load_experiment(write_yaml(minimal_data))
    assert exp.policies[0].autoscaler is not None


def test_a_disaggregated_arm_has_a_slot_for_each_replica_each_pool_may_run(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["policies"] = [{"name": "pd", "kind": "disaggregated", "autoscaler": {
        "prefill": {"min_replicas": 0, "max_replicas": 3},
        "decode": {"max_replicas": 5, "initial_replicas": 2}}}]
    exp, _ = load_experiment(write_yaml(minimal_data))
    arm = exp.policies[0]
    assert isinstance(arm, DisaggregatedArm) and arm.autoscaler is not None
    assert [pool_slots(arm, role) for role in ("prefill", "decode")] == [3, 5]
    assert arm.autoscaler.prefill.start_replicas == 0
    assert arm.autoscaler.decode.start_replicas == 2
