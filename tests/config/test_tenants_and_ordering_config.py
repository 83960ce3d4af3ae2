"""The experiment file's tenants and orderings: defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchsim.experiment.loader import ConfigError, load_experiment, validate_experiment
from batchsim.experiment.schema import Experiment, FcfsOrdering


def _tenants() -> list[dict[str, Any]]:
    return [
        {"name": "chat", "arrivals": {"kind": "poisson", "rate": 4.0},
         "prompt_tokens": {"kind": "fixed", "value": 64},
         "output_tokens": {"kind": "fixed", "value": 8}, "slo": {"ttft_p99_s": 0.5}},
        {"name": "docs", "arrivals": {"kind": "constant", "rate": 0.5}, "priority": 1,
         "prompt_tokens": {"kind": "fixed", "value": 4000},
         "output_tokens": {"kind": "fixed", "value": 8}},
    ]


def _multi_tenant(minimal_data: dict[str, Any], **arm: Any) -> dict[str, Any]:
    minimal_data["workload"] = {"tenants": _tenants(), "duration_s": 10}
    minimal_data["policies"] = [{"name": "arm", "kind": "continuous", **arm}]
    return minimal_data


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        validate_experiment(data, source="exp.yaml")
    return str(err.value)


def test_every_arm_defaults_to_fcfs(minimal_data: dict[str, Any]) -> None:
    exp = Experiment.model_validate(minimal_data)
    assert all(arm.ordering == FcfsOrdering() for arm in exp.policies)


def test_tenants_replace_the_single_stream(minimal_data: dict[str, Any]) -> None:
    exp = Experiment.model_validate(_multi_tenant(minimal_data, ordering={"kind": "priority",
                                                                          "aging_s": 5}))
    assert exp.workload.arrivals is None
    assert exp.workload.tenants is not None
    assert [t.name for t in exp.workload.tenants] == ["chat", "docs"]
    assert exp.workload.tenants[1].slo is None


@pytest.mark.parametrize(("change", "message"), [
    ({"ordering": {"kind": "lifo"}},
     "exp.yaml: policies.0.ordering.kind: expected one of: fcfs, priority, "
     "shortest_prompt_first, fair_share (got 'lifo')"),
    ({"ordering": {"kind": "shortest_prompt_first", "aging_s": 3}},
     "exp.yaml: policies.0.ordering.aging_s: unknown key (expected one of: kind, "
     "aging_tokens_per_s)"),
    ({"ordering": {"kind": "fcfs", "aging_s": 3}},
     "exp.yaml: policies.0.ordering.aging_s: unknown key (expected one of: kind)"),
    ({"ordering": {"kind": "priority", "aging_s": 0}},
     "exp.yaml: policies.0.ordering.aging_s: expected a value > 0 (got 0)"),
    ({"ordering": {"kind": "fair_share", "input_token_weight": 0, "output_token_weight": 0}},
     "exp.yaml: policies.0.ordering.output_token_weight: input_token_weight and "
     "output_token_weight cannot both be 0"),
])
def test_bad_orderings_name_their_key(minimal_data: dict[str, Any], change, message) -> None:
    assert _error(_multi_tenant(minimal_data, **change)) == message


def test_priority_and_fair_share_need_tenants(minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"] = [{"name": "p", "kind": "static", "ordering": {"kind": "priority"}}]
    assert _error(minimal_data) == (
        "exp.yaml: policies.0.ordering.kind: priority needs workload.tenants: with one stream "
        "every request has the same tenant and priority")


def test_shortest_prompt_first_needs_no_tenants(minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"] = [{"name": "p", "kind": "chunked_prefill",
                                 "ordering": {"kind": "shortest_prompt_first"}}]
    Experiment.model_validate(minimal_data)


def test_orderings_do_not_apply_to_the_shared_queue(minimal_data: dict[str, Any]) -> None:
    data = _multi_tenant(minimal_data, ordering={"kind": "fair_share"})
    data["router"] = "shared_queue"
    assert _error(data).startswith(
        "exp.yaml: policies.0.ordering.kind: fair_share orders each replica's waiting queue, "
        "but with router: shared_queue")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda w: w["tenants"][0]["arrivals"].pop("rate"),
     "exp.yaml: workload.tenants.0.arrivals.rate: required key is missing"),
    (lambda w: w["tenants"][1]["arrivals"].update(kind="closed_loop", concurrency=2),
     "exp.yaml: workload.tenants.1.arrivals.kind: expected one of: poisson, gamma, constant, "
     "trace (got 'closed_loop')"),
    (lambda w: w["tenants"][1].update(name="chat"),
     "exp.yaml: workload.tenants.1.name: duplicate tenant name 'chat' (already used by "
     "tenants.0)"),
    (lambda w: w.update(arrivals={"kind": "poisson", "rate": 1.0}),
     "exp.yaml: workload.arrivals: not allowed with tenants: each tenant has its own"),
    (lambda w: w.update(num_requests=10),
     "exp.yaml: workload: give exactly one of duration_s or num_requests (got both)"),
    (lambda w: w.update(tenants=[]),
     "exp.yaml: workload.tenants: expected at least 1 item(s) (got [])"),
    (lambda w: w.pop("tenants"),
     "exp.yaml: workload.arrivals: required key is missing (or give tenants)"),
])
def test_bad_tenants_name_their_key(minimal_data: dict[str, Any], edit, message) -> None:
    data = _multi_tenant(minimal_data)
    edit(data["workload"])
    assert _error(data) == message


def test_the_shipped_fairness_experiment_validates() -> None:
    exp, _ = load_experiment(Path(__file__).resolve().parents[2] / "experiments"
                             / "fairness.yaml")
    kinds = [getattr(arm, "ordering", FcfsOrdering()).kind for arm in exp.policies]
    assert kinds == ["fcfs", "shortest_prompt_first", "shortest_prompt_first", "fair_share"]
