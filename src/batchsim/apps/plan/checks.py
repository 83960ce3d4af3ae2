"""The plan's checks that need no run, for `batchsim validate`: a file it passes does not
fail in `batchsim plan` before the first run on a name, an axis or a price."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from batchsim.apps.plan.candidates import candidate_deployments
from batchsim.apps.plan.cost import cost_per_hour, plan_prices
from batchsim.apps.plan.fleets import fleet_deployments
from batchsim.apps.plan.planner import check_names, load_parameter, load_variants, plan_of
from batchsim.apps.plan.setups import setup_overrides
from batchsim.experiment.deployment_size import arm_experiment
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.schema import DisaggregatedArm, Experiment, PlanCandidatesConfig


def check_plan(file: Path, overrides: list[str], exp: Experiment) -> None:
    """Every variant's names, candidate axes, fleets and prices, as `plan` checks them; the
    pool splits and fleets (few, and new keys on the arm) are also loaded as they will run."""
    plan, slo = plan_of(exp)
    variants = load_variants(file, overrides, plan)
    check_names(variants, plan)
    parameter = load_parameter(plan)
    for variant in variants:
        hardware = _used_hardware(variant.exp)
        to_load: list[tuple[str, dict[str, Any], str, float | None]] = []
        if plan.target_rate is not None:
            candidates = plan.candidates or PlanCandidatesConfig()
            hardware |= set(candidates.hardware or [])
            to_load += [(arm, deployment, label, plan.target_rate) for arm, deployment, label,
                        pools in candidate_deployments(variant.exp, candidates) if pools]
        if plan.autoscaling is not None:  # on the file's own traffic: no load set
            to_load += [(arm, deployment, label, None) for arm, deployment, label, _
                        in fleet_deployments(variant.exp, plan.autoscaling)]
        cost_per_hour(dict.fromkeys(sorted(hardware), 1), plan_prices(variant.exp, plan))
        for arm, deployment, label, load in to_load:
            overrides = setup_overrides(variant, slo, arm, parameter, load, deployment)
            try:
                load_experiment(file, overrides)
            except ConfigError as err:
                raise ConfigError(f"plan ({variant.name}, {label}): {err}") from None


def _used_hardware(exp: Experiment) -> set[str]:
    """Every GPU kind the file's arms name (their own, or each pool's)."""
    used = {exp.hardware}
    for arm in exp.policies:
        if isinstance(arm, DisaggregatedArm):
            used |= {h for h in (arm.prefill_hardware, arm.decode_hardware) if h}
        else:
            used.add(arm_experiment(exp, arm).hardware)
    return used
