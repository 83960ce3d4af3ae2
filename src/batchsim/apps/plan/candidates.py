"""The fewest-GPUs / cheapest question: every candidate configuration at the target load, run
and judged, then ranked — those that meet the SLO by cost (or GPUs), then those that miss it,
then those that do not fit."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from batchsim.apps.plan.cost import cost_per_hour, usd_per_million_tokens
from batchsim.apps.plan.evaluate import DOES_NOT_FIT, MEETS, Evaluation
from batchsim.apps.plan.objective import COST, GPUS, objective_value
from batchsim.apps.plan.pool_splits import pool_splits
from batchsim.apps.plan.setups import Setup, Variant, make_setup, safe_name
from batchsim.experiment.loader import ConfigError
from batchsim.experiment.schema import (
    DisaggregatedArm,
    Experiment,
    PlanCandidatesConfig,
    PlanConfig,
    SLOConfig,
)

_STATUS_ORDER = {MEETS: 0, DOES_NOT_FIT: 2}  # anything else (misses) is 1


def candidate_arms(exp: Experiment, candidates: PlanCandidatesConfig) -> list[str]:
    names = [arm.name for arm in exp.policies]
    for name in candidates.policies or []:
        if name not in names:
            raise ConfigError(f"plan.candidates.policies: no arm named {name!r} "
                              f"(arms: {', '.join(names)})")
    return list(candidates.policies or names)


def candidate_setups(file: Path, variant: Variant, plan: PlanConfig, slo: SLOConfig,
                     parameter: str) -> list[Setup]:
    """Every combination of the candidate lists, per arm; `replicas` only for colocated arms,
    the pool splits of `disaggregated` only for disaggregated ones."""
    assert plan.target_rate is not None
    candidates = plan.candidates or PlanCandidatesConfig()
    setups = []
    for arm_name, deployment, label, pools in candidate_deployments(variant.exp, candidates):
        setups.append(make_setup(file, variant, slo, arm_name, parameter, plan.target_rate,
                                 deployment, f"candidates/{safe_name(label)}", label,
                                 describe_pools=pools))
    return setups


def candidate_deployments(exp: Experiment, candidates: PlanCandidatesConfig
                          ) -> list[tuple[str, dict[str, Any], str, bool]]:
    """(arm, deployment overrides, label, whether its pools are split) of every candidate:
    what the plan will run, from the file's values alone (`validate` lists them too)."""
    found = []
    for arm_name in candidate_arms(exp, candidates):
        arm = next(a for a in exp.policies if a.name == arm_name)
        if isinstance(arm, DisaggregatedArm) and candidates.disaggregated is not None:
            if getattr(arm, "autoscaler", None) is not None:  # its pools are the scaler's
                raise ConfigError(f"plan.candidates.disaggregated: arm {arm_name!r} scales its "
                                  "pools with an autoscaler; splits are tried for fixed pools "
                                  "(leave the arm out of candidates.policies)")
            for hardware in candidates.hardware or [exp.hardware]:
                for split in pool_splits(arm, candidates.disaggregated, exp.tensor_parallel):
                    found.append((arm_name, {"hardware": hardware, **split.overrides(arm_name)},
                                  f"{arm_name} {hardware} {split.label}", True))
            continue
        axes: dict[str, list[Any]] = {
            "hardware": list(candidates.hardware or [exp.hardware]),
            "tensor_parallel": list(candidates.tensor_parallel or [exp.tensor_parallel]),
        }
        if not isinstance(arm, DisaggregatedArm):
            if candidates.pipeline_parallel:  # only when asked: labels keep their old form
                axes["pipeline_parallel"] = list(candidates.pipeline_parallel)
            axes["replicas"] = list(candidates.replicas or [exp.replicas])
        for values in itertools.product(*axes.values()):
            deployment = dict(zip(axes, values, strict=True))
            found.append((arm_name, deployment, _label(arm_name, deployment), False))
    return found


def _label(arm: str, deployment: dict[str, Any]) -> str:
    parts = [arm, str(deployment["hardware"]), f"tp{deployment['tensor_parallel']}"]
    if "pipeline_parallel" in deployment:
        parts[-1] += f"pp{deployment['pipeline_parallel']}"
    if "replicas" in deployment:
        parts.append(f"x{deployment['replicas']}")
    return " ".join(parts)


def rank(evaluations: list[Evaluation], prices: dict[str, float],
         objective: str | None = None) -> list[dict[str, Any]]:
    """One row per candidate, best first: meets (by the objective — default cheapest when
    priced, else fewest GPUs — then fewest GPUs), misses, does not fit; ties by label, so the
    order is the same on every run."""
    rows = [candidate_row(e, prices) for e in evaluations]
    objective = objective or (COST if prices else GPUS)

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return (_STATUS_ORDER.get(row["status"], 1), objective_value(row, objective),
                row["gpus"], row["label"])

    ranked = sorted(rows, key=key)
    for position, row in enumerate(ranked, start=1):
        row["rank"] = position
    return ranked


def served_tokens(evaluation: Evaluation) -> float | None:
    """Output tokens/s served, for a configuration that meets the SLO: what its cost buys.
    (One that misses does not serve the load, so its cost per token means nothing.)"""
    return evaluation.served_output_tps if evaluation.meets else None


def candidate_row(evaluation: Evaluation, prices: dict[str, float]) -> dict[str, Any]:
    setup = evaluation.setup
    per_hour = cost_per_hour(setup.gpus_by_hardware, prices)
    return {
        "label": setup.label, "arm": setup.arm, **setup.deployment,
        "gpus": setup.gpus, "gpus_by_hardware": setup.gpus_by_hardware,
        "usd_per_hour": per_hour,
        "usd_per_million_output_tokens": usd_per_million_tokens(per_hour, served_tokens(
            evaluation)),
        "joules_per_output_token": evaluation.metric("energy", "joules_per_output_token"),
        "status": evaluation.status, "reasons": evaluation.reasons, "folder": setup.folder,
    }
