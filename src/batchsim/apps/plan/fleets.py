"""The fleet-sizing question (`plan.autoscaling`): colocated arms run on the file's own
traffic as fixed replica counts and as autoscaled pools between bounds, each judged by the
SLO and priced by the GPU-hours it paid over the measured window (an autoscaled pool pays for
its serving, starting and draining replicas only; docs/design.md §2 Autoscaling).

The load is not set: a traffic shape that varies over the run (a diurnal day) is what an
autoscaler answers, and bisecting a rate would stretch that shape, not size the fleet.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from batchsim.apps.plan.setups import Setup, Variant, make_setup, safe_name
from batchsim.experiment.deployment_size import arm_experiment
from batchsim.experiment.loader import ConfigError
from batchsim.experiment.schema import (
    AutoscalerConfig,
    DisaggregatedArm,
    Experiment,
    PlanAutoscalingConfig,
    PlanConfig,
    SLOConfig,
)

FIXED, AUTOSCALED = "fixed", "autoscaled"
_KEY = "plan.autoscaling"


def fleet_arms(exp: Experiment, config: PlanAutoscalingConfig) -> list[str]:
    """The colocated arms to size: those listed, else every colocated arm of the file."""
    colocated = [a.name for a in exp.policies if not isinstance(a, DisaggregatedArm)]
    names = [arm.name for arm in exp.policies]
    for name in config.policies or []:
        if name not in names:
            raise ConfigError(f"{_KEY}.policies: no arm named {name!r} (arms: {', '.join(names)})")
        if name not in colocated:
            raise ConfigError(f"{_KEY}.policies: {name!r} is disaggregated; fleets are sized "
                              "for colocated arms (static, continuous, chunked_prefill)")
    if not colocated:
        raise ConfigError(f"{_KEY}: the file has no colocated arm to size")
    return list(config.policies or colocated)


def _bounds(config: PlanAutoscalingConfig, scaler: AutoscalerConfig, arm: str
            ) -> list[tuple[int, int, float]]:
    """(min, max, target) of every autoscaled candidate; a min above its max is skipped."""
    triples = [(low, high, target) for low, high, target in itertools.product(
        config.min_replicas or [scaler.min_replicas], config.max_replicas or [scaler.max_replicas],
        config.target or [scaler.target]) if low <= high]
    if not triples:
        raise ConfigError(f"{_KEY}: no min_replicas <= max_replicas pair for arm {arm!r} "
                          f"(min {config.min_replicas or [scaler.min_replicas]}, "
                          f"max {config.max_replicas or [scaler.max_replicas]})")
    initial = scaler.initial_replicas
    for low, high, _ in triples:
        if initial is not None and not low <= initial <= high:
            raise ConfigError(f"{_KEY}: arm {arm!r} starts with autoscaler.initial_replicas="
                              f"{initial}, outside the bounds [{low}, {high}] tried; remove it "
                              "(the pool then starts at min_replicas)")
    return triples


def fleet_deployments(exp: Experiment, config: PlanAutoscalingConfig
                      ) -> list[tuple[str, dict[str, Any], str, str]]:
    """(arm, overrides, label, FIXED or AUTOSCALED) of every fleet to run, from the file's
    values alone (so `validate` lists them too): fixed counts first, then the bounds."""
    found: list[tuple[str, dict[str, Any], str, str]] = []
    for name in fleet_arms(exp, config):
        arm = next(a for a in exp.policies if a.name == name)
        assert not isinstance(arm, DisaggregatedArm)
        on = arm_experiment(exp, arm.model_copy(update={"autoscaler": None}))
        where = f"{name} {on.hardware} tp{on.tensor_parallel}" + (
            f"pp{on.pipeline_parallel}" if on.pipeline_parallel > 1 else "")
        for replicas in config.fixed_replicas:
            found.append((name, {f"policies.{name}.autoscaler": None,
                                 f"policies.{name}.deployment.replicas": replicas},
                          f"{where} fixed x{replicas}", FIXED))
        if not config.autoscaled:
            continue
        scaler = arm.autoscaler or AutoscalerConfig()
        for low, high, target in _bounds(config, scaler, name):
            found.append((name, {f"policies.{name}.deployment.replicas": None,
                                 f"policies.{name}.autoscaler.min_replicas": low,
                                 f"policies.{name}.autoscaler.max_replicas": high,
                                 f"policies.{name}.autoscaler.target": target},
                          f"{where} auto {low}-{high} target {target:g}", AUTOSCALED))
    return found


def fleet_setups(file: Path, variant: Variant, plan: PlanConfig, slo: SLOConfig,
                 parameter: str) -> list[Setup]:
    assert plan.autoscaling is not None
    return [replace(make_setup(file, variant, slo, arm, parameter, None, overrides,
                               f"autoscaling/{safe_name(label)}", label), extra={"fleet": kind})
            for arm, overrides, label, kind in fleet_deployments(variant.exp, plan.autoscaling)]
