"""Run a plan: the max-rate bisection of every arm and the candidate search, for the base
experiment and every what-if, round by round. Each round gathers the setups every unfinished
search wants next and evaluates them together (in parallel on the executor); bisections need
one round per step, candidates one round in all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from batchsim.apps.executors import Executor
from batchsim.apps.plan.candidates import candidate_setups
from batchsim.apps.plan.cost import cost_per_hour, plan_prices
from batchsim.apps.plan.evaluate import Evaluation, PlanRunner
from batchsim.apps.plan.fleets import fleet_setups
from batchsim.apps.plan.max_rate import MaxRateSearch
from batchsim.apps.plan.objective import check_energy_profiles, resolve_objective
from batchsim.apps.plan.runs import RunStats
from batchsim.apps.plan.setups import Setup, Variant
from batchsim.apps.plan.verdict import slo_targets
from batchsim.apps.sweep.runs import replication_seeds
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.schema import Experiment, PlanConfig, SLOConfig
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model


class Search(Protocol):
    def pending(self) -> list[Setup]: ...
    def record(self, evaluation: Evaluation) -> None: ...


@dataclass(slots=True)
class CandidateSearch:
    setups: list[Setup]
    evaluations: list[Evaluation] = field(default_factory=list)

    def pending(self) -> list[Setup]:
        return [] if self.evaluations else self.setups

    def record(self, evaluation: Evaluation) -> None:
        self.evaluations.append(evaluation)


@dataclass(slots=True)
class VariantPlan:
    variant: Variant
    max_rate: list[MaxRateSearch]
    candidates: CandidateSearch | None
    fleets: CandidateSearch | None = None  # plan.autoscaling, on the file's own traffic


@dataclass(slots=True)
class PlanResult:
    exp: Experiment
    plan: PlanConfig
    slo: SLOConfig
    parameter: str
    seeds: list[int]
    variants: list[VariantPlan]


def plan_of(exp: Experiment) -> tuple[PlanConfig, SLOConfig]:
    """The file's plan and the SLO it must meet; errors when either is missing."""
    if exp.plan is None:
        raise ConfigError("plan: this file has no `plan:` section (see "
                          "docs/how-to/capacity-planning.md)")
    slo = exp.plan.slo or exp.slo
    if not slo_targets(slo):
        raise ConfigError("plan.slo: no target (give ttft_p99_s, tpot_p99_s or e2e_p99_s here "
                          "or in the experiment's slo)")
    return exp.plan, slo


def load_variants(file: Path, overrides: list[str], plan: PlanConfig) -> list[Variant]:
    """The base experiment and one per what-if, each validated now (a bad `set` fails early)."""
    exp, base_dir = load_experiment(file, overrides)
    variants = [Variant("base", tuple(overrides), exp, base_dir)]
    for index, what_if in enumerate(plan.what_if):
        combined = (*overrides, *what_if.set)
        try:
            variant_exp, _ = load_experiment(file, combined)
        except ConfigError as err:
            raise ConfigError(f"plan.what_if.{index} ({what_if.name}): {err}") from None
        variants.append(Variant(what_if.name, combined, variant_exp, base_dir))
    return variants


def check_names(variants: list[Variant], plan: PlanConfig) -> None:
    """Unknown models or GPUs, or an objective they cannot give, are mistakes in the file:
    fail before running anything."""
    for variant in variants:
        load_model(variant.exp.model, variant.base_dir)
        listed = plan.candidates.hardware if plan.candidates else None
        profiles = [load_gpu_profile(hardware, variant.base_dir)
                    for hardware in sorted({variant.exp.hardware, *(listed or [])})]
        objective = resolve_objective(plan, plan_prices(variant.exp, plan))
        check_energy_profiles(objective, profiles)


def build_searches(file: Path, variants: list[Variant], plan: PlanConfig,
                   slo: SLOConfig) -> list[VariantPlan]:
    parameter = load_parameter(plan)
    plans = []
    for variant in variants:
        max_rate = [MaxRateSearch(file, variant, arm.name, slo, plan.rate)
                    for arm in variant.exp.policies] if plan.rate is not None else []
        candidates = None
        if plan.target_rate is not None:
            setups = candidate_setups(file, variant, plan, slo, parameter)
            prices = plan_prices(variant.exp, plan)
            for setup in setups:  # every GPU kind priced, or none: fail before running
                cost_per_hour(setup.gpus_by_hardware, prices)
            candidates = CandidateSearch(setups)
        fleets = None
        if plan.autoscaling is not None:
            fleets = CandidateSearch(priced(fleet_setups(file, variant, plan, slo, parameter),
                                            plan_prices(variant.exp, plan)))
        plans.append(VariantPlan(variant, max_rate, candidates, fleets))
    return plans


def priced(setups: list[Setup], prices: dict[str, float]) -> list[Setup]:
    """The setups, once every GPU kind they use is priced (or none is): fail before running."""
    for setup in setups:
        cost_per_hour(setup.gpus_by_hardware, prices)
    return setups


def load_parameter(plan: PlanConfig) -> str:
    return plan.rate.parameter if plan.rate is not None else "workload.arrivals.rate"


def run_plan(file: Path, overrides: list[str], out_dir: Path, executor: Executor, *,
             on_round: Callable[[int], None] | None = None,
             on_run_done: Callable[[RunStats], None] | None = None) -> PlanResult:
    """Validate everything, then run every search to completion; runs go under `out_dir`."""
    exp, _ = load_experiment(file, overrides)
    plan, slo = plan_of(exp)
    variants = load_variants(file, overrides, plan)
    check_names(variants, plan)
    seeds = replication_seeds(exp.seed, exp.replications)
    runner = PlanRunner(file, out_dir, seeds, executor, slo, plan.keep_up, on_round,
                        on_run_done)
    plans = build_searches(file, variants, plan, slo)
    searches: list[Search] = []
    for variant_plan in plans:
        searches.extend(variant_plan.max_rate)
        searches += [s for s in (variant_plan.candidates, variant_plan.fleets) if s is not None]
    run_rounds(searches, runner)
    return PlanResult(exp, plan, slo, load_parameter(plan), seeds, plans)


def run_rounds(searches: list[Search], runner: PlanRunner) -> None:
    """Until no search wants more: evaluate what every search wants next, all at once."""
    while wanted := [(search, setup) for search in searches for setup in search.pending()]:
        evaluations = runner.evaluate([setup for _, setup in wanted])
        for (search, _), evaluation in zip(wanted, evaluations, strict=True):
            search.record(evaluation)
