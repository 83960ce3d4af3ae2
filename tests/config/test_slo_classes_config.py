"""SLO classes in the experiment file: an arm's `preemption_victim` and `gateway`, with
errors that name the key, refused by `validate` as by `run`."""

from __future__ import annotations

from typing import Any

import pytest

from batchsim.experiment.loader import ConfigError, validate_experiment
from batchsim.experiment.schema import ChunkedPrefillArm, ContinuousArm, Experiment
from tests.config.test_tenants_and_ordering_config import _multi_tenant

PRIORITY = {"ordering": {"kind": "priority"}, "preemption_victim": "priority"}


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        validate_experiment(data, source="exp.yaml")
    return str(err.value)


def test_arms_default_to_newest_first_and_no_gateway(minimal_data: dict[str, Any]) -> None:
    arm = Experiment.model_validate(minimal_data).policies[1]
    assert isinstance(arm, ContinuousArm)
    assert arm.preemption_victim == "newest" and arm.gateway is None


@pytest.mark.parametrize("kind", ["continuous", "chunked_prefill"])
def test_priority_preemption_and_a_gateway_validate(minimal_data: dict[str, Any],
                                                    kind: str) -> None:
    data = _multi_tenant(minimal_data, **PRIORITY,
                         gateway={"shed": [{"tenant": "docs", "max_queued_per_replica": 4}]})
    data["policies"][0]["kind"] = kind
    arm = validate_experiment(data, source="exp.yaml").policies[0]
    assert isinstance(arm, ContinuousArm | ChunkedPrefillArm) and arm.gateway is not None
    assert arm.gateway.shed[0].max_queued_per_replica == 4


@pytest.mark.parametrize(("arm", "message"), [
    ({"preemption_victim": "priority"},
     "exp.yaml: policies.0.preemption_victim: priority needs `ordering: {kind: priority}` "
     "(got ordering fcfs)"),
    ({"preemption_victim": "oldest"},
     "exp.yaml: policies.0.preemption_victim: expected one of: newest, priority"),
    ({**PRIORITY, "gateway": {"shed": [{"tenant": "bulk", "max_queued_per_replica": 4}]}},
     "exp.yaml: policies.0.gateway.shed.0.tenant: unknown tenant 'bulk' (workload.tenants "
     "are 'chat', 'docs')"),
    ({"gateway": {"shed": [{"tenant": "docs", "max_queued_per_replica": 1},
                           {"tenant": "docs", "max_queued_per_replica": 2}]}},
     "exp.yaml: policies.0.gateway.shed.1.tenant: tenant 'docs' is listed twice"),
    ({"gateway": {"shed": [{"tenant": "docs", "max_queued_per_replica": -1}]}},
     "exp.yaml: policies.0.gateway.shed.0.max_queued_per_replica: "),
    ({"gateway": {"shed": []}}, "exp.yaml: policies.0.gateway.shed: "),
    ({"gateway": {"shed": [{"tenant": "docs"}]}},
     "exp.yaml: policies.0.gateway.shed.0.max_queued_per_replica: "),
])
def test_bad_slo_class_keys_name_the_key(minimal_data: dict[str, Any], arm: dict[str, Any],
                                         message: str) -> None:
    assert message in _error(_multi_tenant(minimal_data, **arm))


def test_a_gateway_needs_tenants(minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"][1]["gateway"] = {
        "shed": [{"tenant": "all", "max_queued_per_replica": 1}]}
    assert "exp.yaml: policies.1.gateway.shed: sheds tenants by class and needs " \
           "workload.tenants" in _error(minimal_data)


def test_static_and_disaggregated_arms_have_no_slo_class_keys(
        minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"][0]["preemption_victim"] = "priority"
    assert "policies.0.preemption_victim: unknown key" in _error(minimal_data)
