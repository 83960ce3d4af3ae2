"""Run every arm of an experiment on the same traffic and collect its tables and metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from batchsim.experiment.arm_energy import (
    arm_energy_and_cost,
    colocated_groups,
    disaggregated_groups,
)
from batchsim.experiment.arm_trace import arm_timeline, keep_trace
from batchsim.experiment.autoscaling import (
    add_autoscaler_metrics,
    any_autoscaled,
    autoscaler_of,
    paid_groups,
    timeline_of,
    with_replica_columns,
)
from batchsim.experiment.colocated import build_colocated
from batchsim.experiment.deployment import (
    Deployment,
    deployment_summary,
    keyed_error,
    resolve_deployment,
)
from batchsim.experiment.deployment_size import arm_experiment, colocated_gpus, gpus_per_replica
from batchsim.experiment.disaggregation import build_disaggregated
from batchsim.experiment.fairness import arm_fairness, tenant_infos
from batchsim.experiment.input_digest import inputs_digest
from batchsim.experiment.kv_tier_setup import replica_tiers
from batchsim.experiment.policy_factory import arm_prefix_caching
from batchsim.experiment.pool_scaling import (
    add_pool_scaler_metrics,
    paid_pool_groups,
    pool_timelines,
    with_pool_replica_columns,
)
from batchsim.experiment.schema import DisaggregatedArm, Experiment
from batchsim.experiment.speculative_setup import SpeculativeSetupError
from batchsim.experiment.traffic import BuiltTraffic, build_traffic
from batchsim.gpu.model_spec import ModelError
from batchsim.metrics.bench_compat import restate_goodput
from batchsim.metrics.fairness import add_slowdown
from batchsim.metrics.kv_tiers import add_tier_cached_tokens, kv_tier_metrics
from batchsim.metrics.padding import padding_fraction
from batchsim.metrics.prefix import add_cached_tokens, prefix_cache_metrics
from batchsim.metrics.summary import SLOTargets, measured_mask, summarize
from batchsim.metrics.tables import requests_table
from batchsim.metrics.timeseries import bin_timeseries
from batchsim.sim.engine import Simulation
from batchsim.sim.recorder import ITLLog
from batchsim.sim.step_stats import Measurement


@dataclass(slots=True)
class ArmResult:
    name: str
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    metrics: dict[str, object]
    wall_s: float  # not written to the outputs: they must not depend on the machine
    # Every inter-token gap, kept only when asked for (it grows with the steps simulated).
    token_gaps: ITLLog | None = None
    # The arm's timeline (Chrome trace JSON) when `output.trace` asks for one.
    trace: dict[str, Any] | None = None


@dataclass(slots=True)
class ExperimentResult:
    experiment: Experiment
    deployment: Deployment
    traffic: BuiltTraffic
    inputs_digest: str  # the files the run read besides the experiment (input_digest.py)
    arms: list[ArmResult] = field(default_factory=list)


def slo_targets(exp: Experiment) -> SLOTargets:
    return SLOTargets(ttft_s=exp.slo.ttft_p99_s, tpot_s=exp.slo.tpot_p99_s,
                      e2e_s=exp.slo.e2e_p99_s)


def run_experiment(
    exp: Experiment, base_dir: Path, on_arm_done: Callable[[ArmResult], None] | None = None,
    on_progress: Callable[[str, float], None] | None = None, keep_token_gaps: bool = False,
) -> ExperimentResult:
    """Simulate every arm; `on_progress(arm, simulated_seconds)` is called now and then;
    `keep_token_gaps` keeps each arm's inter-token gaps (`ArmResult.token_gaps`)."""
    deployment = resolve_deployment(exp, base_dir)
    traffic = build_traffic(exp.workload, seed=exp.seed, base_dir=base_dir,
                            max_model_len=deployment.max_model_len)
    result = ExperimentResult(exp, deployment, traffic, inputs_digest(exp, base_dir))
    for index, arm in enumerate(exp.policies):
        arm_exp = arm_experiment(exp, arm)
        arm_deployment = deployment
        if arm_exp is not exp:
            with keyed_error(f"policies.{index}.deployment", ValueError):
                arm_deployment = resolve_deployment(arm_exp, base_dir)
        started = time.perf_counter()
        progress = None
        if on_progress is not None:
            def progress(now: float, arm_name: str = arm.name) -> None:
                on_progress(arm_name, now)
        disaggregated, colocated = None, None
        if isinstance(arm, DisaggregatedArm):
            disaggregated = build_disaggregated(
                exp, arm, index, model=deployment.model, base_dir=base_dir,
                max_model_len=deployment.max_model_len, traffic=traffic, on_progress=progress,
                engine=deployment.engine)
            simulation: Simulation = disaggregated.simulation
        else:
            with keyed_error(f"policies.{index}.speculative", ModelError,
                              SpeculativeSetupError):
                colocated = build_colocated(exp, arm_exp, arm, index, arm_deployment,
                                            traffic.traffic, base_dir,
                                            deployment.max_model_len, progress)
            simulation = colocated.simulation
        simulation.record.measure(Measurement(exp.warmup_s, exp.cooldown_s,
                                              exp.output.timeseries_bin_s))
        keep_trace(exp.output, simulation)
        record = simulation.run()
        requests = add_slowdown(requests_table(record.requests, record.itl),
                                arm_deployment.cost_model)
        prefix_caching = arm_prefix_caching(arm, exp.kv_cache.prefix_caching)
        if prefix_caching:
            requests = add_cached_tokens(requests, record.requests)
        tier_stacks = replica_tiers(simulation)
        if tier_stacks:
            requests = add_tier_cached_tokens(requests, record.requests,
                                              [tier.kind for tier in tier_stacks[0]])
        # From the request objects, before they go: their padding slots are in no table.
        padding = padding_fraction(record.requests,
                                   measured_mask(requests, exp.warmup_s, exp.cooldown_s))
        if disaggregated is None:
            # Every output of a request is in its table now (a disaggregated arm's transfer
            # columns still read the objects): the rest reads the step statistics and gaps.
            record.requests.clear()
        metrics = summarize(requests, record, warmup_s=exp.warmup_s, cooldown_s=exp.cooldown_s,
                            slo=slo_targets(exp))
        if colocated is not None:
            metrics["gpus"] = colocated_gpus(exp, arm)
            metrics["deployment"] = deployment_summary(arm_exp, arm_deployment)
            colocated.add_metrics(metrics, record)
        metrics["padding_fraction"] = padding
        metrics["clipped_requests"] = traffic.clipped.count
        if prefix_caching:
            metrics["prefix_cache"] = prefix_cache_metrics(
                requests, measured_mask(requests, exp.warmup_s, exp.cooldown_s),
                exp.kv_cache.block_size)
        if tier_stacks:
            metrics["kv_tiers"] = kv_tier_metrics(
                requests, measured_mask(requests, exp.warmup_s, exp.cooldown_s),
                exp.kv_cache.block_size, tier_stacks, arm_deployment.memory.block_bytes)
        if disaggregated is not None:  # transfer columns and metrics, per-pool use
            requests = disaggregated.add_outputs(requests, metrics, exp)
        metrics.update(arm_fairness(exp, requests, metrics))
        if exp.workload.tenants is not None:  # goodput against each tenant's SLO now
            restate_goodput(metrics, any(info.slo.as_dict() for info in tenant_infos(exp)))
        groups = (disaggregated_groups(exp, arm, disaggregated)
                  if isinstance(arm, DisaggregatedArm) and disaggregated is not None
                  else colocated_groups(arm_exp, arm_deployment.gpu))
        window = metrics["window_s"]
        assert isinstance(window, float)
        timeline, autoscaler = timeline_of(simulation), autoscaler_of(arm)
        if timeline is not None and disaggregated is None:  # paid for the replicas the pool
            # ran, cold starts included
            groups = paid_groups(groups, timeline, exp.warmup_s, exp.warmup_s + window)
        timelines = None if disaggregated is None else pool_timelines(disaggregated.simulation)
        if timelines is not None:  # each pool paid for what it ran
            groups = paid_pool_groups(groups, timelines, exp.warmup_s, exp.warmup_s + window)
        metrics.update(arm_energy_and_cost(exp, requests, record, groups, window))
        end = float(requests["finish_s"].max()) if len(requests) else 0.0
        timeseries = bin_timeseries(record, end)
        if colocated is not None and any_autoscaled(exp):
            timeseries = with_replica_columns(timeseries, timeline, arm_exp.replicas)
        if disaggregated is not None and any_autoscaled(exp):
            timeseries = with_pool_replica_columns(
                timeseries, timelines,
                {p.role: p.replicas for p in (disaggregated.prefill, disaggregated.decode)})
        if disaggregated is not None and timelines is not None \
                and isinstance(arm, DisaggregatedArm):
            add_pool_scaler_metrics(
                metrics, arm, timelines, record, requests, exp, end=exp.warmup_s + window,
                run_end=end, tensor_parallel={p.role: p.tensor_parallel for p in
                                              (disaggregated.prefill, disaggregated.decode)})
        if timeline is not None and autoscaler is not None:
            add_autoscaler_metrics(metrics, timeline, autoscaler, record, start=exp.warmup_s,
                                   end=exp.warmup_s + window, run_end=end,
                                   gpus_per_replica=gpus_per_replica(arm_exp))
        arm_result = ArmResult(arm.name, requests, timeseries, metrics,
                               time.perf_counter() - started,
                               record.itl if keep_token_gaps else None,
                               arm_timeline(simulation, requests, arm.name))
        result.arms.append(arm_result)
        if on_arm_done is not None:
            on_arm_done(arm_result)
    return result
