"""The shipped SLO-classes experiment shows what docs/how-to/slo-classes.md says: under
overload on a small KV cache the interactive class keeps its SLO once priority ordering and
priority preemption are on, and the batch class absorbs the preemptions and the shedding.
About 2 s, so with `-m slow`; its rules are pinned fast by tests/policies/
test_priority_preemption.py and tests/sim/test_gateway.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_interactive_class_keeps_its_slo_and_batch_absorbs_the_overload():
    exp, base_dir = load_experiment(REPO / "experiments" / "slo_classes.yaml")
    arms = {arm.name: arm.metrics["tenants"] for arm in run_experiment(exp, base_dir).arms}

    def of(arm: str, tenant: str, key: str) -> object:
        return arms[arm][tenant][key]  # type: ignore[index]

    assert of("fcfs", "interactive", "slo_attainment") < 0.5  # everyone queues alike
    assert of("fcfs", "interactive", "preemptions") > 0
    for arm in ("priority", "priority-shed"):
        assert of(arm, "interactive", "slo_attainment") == 1.0
        assert of(arm, "interactive", "preemptions") == 0
        assert of(arm, "batch", "preemptions") > 0
        assert of(arm, "interactive", "rejected_by_reason") == {}
    assert of("priority", "batch", "rejected_by_reason") == {}
    assert of("priority-shed", "batch", "rejected_by_reason") == {"shed_overload": 72}
