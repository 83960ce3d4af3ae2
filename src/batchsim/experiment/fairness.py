"""The fairness part of an arm's summary: per-tenant metrics with each tenant's own SLO,
Jain's index and slowdown by prompt length (computed in batchsim/metrics/fairness.py)."""

from __future__ import annotations

import pandas as pd

from batchsim.experiment.schema import Experiment, SLOConfig
from batchsim.metrics.fairness import TenantInfo, fairness_metrics, slowdown_fairness
from batchsim.metrics.summary import SLOTargets, measured_mask


def slo_of(slo: SLOConfig) -> SLOTargets:
    return SLOTargets(ttft_s=slo.ttft_p99_s, tpot_s=slo.tpot_p99_s, e2e_s=slo.e2e_p99_s)


def tenant_infos(exp: Experiment) -> list[TenantInfo]:
    """The workload's tenants in index order; a tenant without an SLO uses the experiment's."""
    if exp.workload.tenants is None:
        return [TenantInfo("all", slo_of(exp.slo))]
    return [TenantInfo(t.name, slo_of(exp.slo if t.slo is None else t.slo))
            for t in exp.workload.tenants]


def arm_fairness(exp: Experiment, requests: pd.DataFrame,
                 metrics: dict[str, object]) -> dict[str, object]:
    """`fairness` for every workload; for a multi-tenant one also `tenants`, and goodput and
    SLO attainment counted against each request's tenant SLO (replacing the experiment-wide
    ones). Rates use the arm's measurement window (`window_s` of `metrics`)."""
    window = metrics["window_s"]
    assert isinstance(window, float)
    measured = measured_mask(requests, exp.warmup_s, exp.cooldown_s)
    if exp.workload.tenants is None:
        # One tenant: no per-tenant metrics, and no Jain's index over one share.
        return {"fairness": slowdown_fairness(requests[measured], None)}
    return fairness_metrics(requests, measured, window, tenant_infos(exp))
