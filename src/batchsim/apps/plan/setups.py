"""A setup: one configuration the plan evaluates, as overrides of the experiment file.

A setup runs one arm only (the plan asks about each arm separately), at one load, on one
deployment. Its overrides are the user's `--set`s, its variant's (what-if's), then the plan's:
no sweep, one replication, the plan's SLO, the single arm, the load, and the deployment.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from batchsim.experiment.deployment_size import arm_experiment, colocated_gpus
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.schema import Arm, DisaggregatedArm, Experiment, SLOConfig


@dataclass(frozen=True, slots=True)
class Variant:
    """The base plan or one what-if: the experiment with the variant's overrides applied."""

    name: str  # "base" or the what-if's name
    overrides: tuple[str, ...]  # the user's --set, then the what-if's
    exp: Experiment
    base_dir: Path

    @property
    def folder(self) -> str:
        return "base" if self.name == "base" else f"what-if_{self.name}"


@dataclass(frozen=True, slots=True)
class Setup:
    """One configuration: run it (with replications) and judge it against the SLO."""

    variant: str
    arm: str
    label: str  # for tables: arm, hardware, tensor parallel, replicas
    folder: str  # relative to the plan's output folder
    overrides: tuple[str, ...]  # everything but the replication seed
    load: float | None  # None: the file's own traffic (the autoscaling question)
    deployment: dict[str, Any]  # hardware, tensor_parallel, replicas (as run)
    gpus_by_hardware: dict[str, int]
    does_not_fit: str | None = None  # why the model does not fit, if it does not
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return sum(self.gpus_by_hardware.values())


def yaml_value(value: Any) -> str:
    """A value as `--set` parses it back (YAML flow style, one line)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix(
        "...").strip()


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text)[:80]


def plan_overrides(slo: SLOConfig, arm: Arm, parameter: str, load: float | None) -> list[str]:
    """The fixed part of every setup: a plain run of one arm at one load (None: the file's
    own) under the plan's SLO.

    `plan=null` keeps the plan's own keys out of each run's resolved configuration, so that
    editing the plan (a tolerance, a what-if) does not invalidate runs already on disk.
    """
    fixed = ["sweep=null", "replications=1", "plan=null",
             f"slo={json.dumps(slo.model_dump(mode='json'))}",
             f"policies=[{json.dumps(arm.model_dump(mode='json'))}]"]
    return fixed if load is None else [*fixed, f"{parameter}={yaml_value(load)}"]


POOL_KEYS = ("prefill_replicas", "prefill_tensor_parallel", "decode_replicas",
             "decode_tensor_parallel")


def pool_sizes(exp: Experiment, arm: DisaggregatedArm) -> dict[str, int]:
    """A disaggregated arm's pools as run: replicas and tensor parallelism of each."""
    return {"prefill_replicas": arm.prefill_replicas,
            "prefill_tensor_parallel": arm.prefill_tensor_parallel or exp.tensor_parallel,
            "decode_replicas": arm.decode_replicas,
            "decode_tensor_parallel": arm.decode_tensor_parallel or exp.tensor_parallel}


def gpus_by_hardware(exp: Experiment, arm: Arm) -> dict[str, int]:
    """GPUs an arm occupies, by hardware: replicas × GPUs per replica, or both pools of a
    disaggregated arm (each with its own hardware, replicas and tensor parallelism)."""
    if not isinstance(arm, DisaggregatedArm):
        return {arm_experiment(exp, arm).hardware: colocated_gpus(exp, arm)}
    use: dict[str, int] = {}
    for role in ("prefill", "decode"):
        hardware = getattr(arm, f"{role}_hardware") or exp.hardware
        tp = getattr(arm, f"{role}_tensor_parallel") or exp.tensor_parallel
        use[hardware] = use.get(hardware, 0) + getattr(arm, f"{role}_replicas") * tp
    return use


def setup_overrides(variant: Variant, slo: SLOConfig, arm_name: str, parameter: str,
                    load: float | None, deployment: dict[str, Any]) -> list[str]:
    """Everything a setup sets: the variant's overrides, the plan's, then its deployment."""
    arm = next(a for a in variant.exp.policies if a.name == arm_name)
    return [*variant.overrides, *plan_overrides(slo, arm, parameter, load),
            *(f"{key}={yaml_value(value)}" for key, value in deployment.items())]


def make_setup(file: Path, variant: Variant, slo: SLOConfig, arm_name: str, parameter: str,
               load: float | None, deployment: dict[str, Any], folder: str, label: str, *,
               describe_pools: bool = False) -> Setup:
    """Resolve a setup: validate its overrides, count its GPUs and check that it fits.
    `describe_pools` adds a disaggregated arm's pool sizes to its resolved deployment."""
    from batchsim.apps.plan.fit import fit_problem  # loads models and profiles

    overrides = setup_overrides(variant, slo, arm_name, parameter, load, deployment)
    try:
        exp, base_dir = load_experiment(file, overrides)
    except ConfigError as err:
        raise ConfigError(f"plan ({variant.name}, {label}): {err}") from None
    resolved = {"hardware": exp.hardware, "tensor_parallel": exp.tensor_parallel,
                "pipeline_parallel": exp.pipeline_parallel, "replicas": exp.replicas}
    run_arm = exp.policies[0]
    if describe_pools and isinstance(run_arm, DisaggregatedArm):
        resolved.update(pool_sizes(exp, run_arm))
    return Setup(variant.name, arm_name, label, f"{variant.folder}/{folder}", tuple(overrides),
                 load, resolved, gpus_by_hardware(exp, exp.policies[0]),
                 fit_problem(exp, base_dir))
