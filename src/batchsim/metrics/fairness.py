"""Fairness metrics (docs/design.md §6): slowdown, per-tenant metrics and Jain's index.

- **Slowdown** of a finished request = its E2E latency / its service time alone: the seconds the
  cost model gives for it on an idle replica, its whole prompt in one step (which emits the
  first token) and then one decode step per further output token. 1.0 is no waiting and no
  sharing; the same denominator for every arm, so arms compare on the same scale.
- **Per-tenant metrics**: the usual latency distributions, throughput over the arm's window,
  goodput / SLO attainment against that tenant's own SLO, and its preemptions and rejections
  by reason (which class absorbed an overload: docs/how-to/slo-classes.md). The arm's overall
  goodput and SLO attainment then count a request as meeting the SLO when it meets its
  tenant's.
- **Jain's index** over per-tenant service: `(Σx)² / (n·Σx²)` over the n tenants with demand,
  1 when every tenant gets its fair share and 1/n when one tenant gets everything. Service and
  demand are counted in weighted tokens, `prompt + 2 × output` (the fair_share ordering's
  default weights): a tenant's demand is that of its measured requests, its service that of
  those finished by the end of the measured arrivals (while every tenant still sends). `x` is
  service divided by the tenant's max-min fair share of the total served (water-filling: no
  tenant's share exceeds its demand, the rest is split equally), so a light tenant fully served
  and a heavy one getting the rest scores 1, while one tenant crowding out another scores less.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pandas as pd

from batchsim.metrics.summary import (
    LATENCY_COLUMNS,
    SLOTargets,
    distribution,
    meets_slo,
    rejected_by_reason,
)
from batchsim.sim.cost_protocol import StepCostModel

SERVICE_INPUT_WEIGHT = 1.0
SERVICE_OUTPUT_WEIGHT = 2.0
# Prompt-length buckets of the slowdown table: [edge_i, edge_i+1) tokens, the last open-ended.
PROMPT_BUCKET_EDGES = (1, 256, 1024, 4096, 16384)


@dataclass(frozen=True, slots=True)
class TenantInfo:
    name: str
    slo: SLOTargets


def isolated_service_s(prompt: np.ndarray, output: np.ndarray,
                       cost: StepCostModel) -> np.ndarray:
    """Seconds each request takes alone on an idle replica (see the module docstring)."""
    if prompt.size == 0:
        return np.zeros(0)
    longest = int((prompt + output).max())
    one = np.ones(1, dtype=np.int64)
    # decode[c]: one decode step of a lone sequence over c cached tokens.
    decode = cost.decode_step_seconds(one, np.zeros(1, dtype=np.int64), 1, longest)
    before = np.concatenate(([0.0], np.cumsum(decode)))  # before[k] = Σ decode[c < k]
    # The decode steps of a request see contexts prompt .. prompt + output − 2.
    decode_s = before[prompt + output - 1] - before[prompt]
    distinct, which = np.unique(prompt, return_inverse=True)
    prefill = np.array([_prefill_seconds(cost, p) for p in distinct.tolist()])
    return prefill[which] + decode_s


def _prefill_seconds(cost: StepCostModel, prompt: int) -> float:
    """A lone prefill of `prompt` tokens, priced from lists (`step_seconds`, equal to
    `step_time(...).seconds` bit for bit and cheaper: docs/performance.md, item 27)."""
    return cost.step_seconds([prompt], [0], 1)


def add_slowdown(requests: pd.DataFrame, cost: StepCostModel) -> pd.DataFrame:
    """`requests` with `isolated_service_s` and `slowdown` (NaN for rejected requests;
    both NaN for one longer than max_model_len, which no replica could run alone either)."""
    runnable = (requests["reject_kind"] != "max_model_len").to_numpy()
    alone = np.full(len(requests), np.nan)
    # A trace row may ask for any length; pricing it alone would need memory per token.
    alone[runnable] = isolated_service_s(requests["prompt_tokens"].to_numpy()[runnable],
                                         requests["output_tokens"].to_numpy()[runnable], cost)
    return requests.assign(isolated_service_s=alone,
                           slowdown=requests["e2e_s"].to_numpy() / alone)


def jain_index(values: np.ndarray) -> float | None:
    """Jain's fairness index of non-negative values; None without a positive value."""
    total = float(values.sum())
    if values.size == 0 or total <= 0:
        return None
    return total * total / (values.size * float(np.square(values).sum()))


def max_min_shares(demand: np.ndarray, total: float) -> np.ndarray:
    """Water-filling: split `total` equally, but never more than a demand; what a small demand
    leaves goes to the others."""
    shares = np.zeros(demand.size)
    left, open_ = total, list(np.argsort(demand, kind="stable"))
    while open_:
        level = left / len(open_)
        smallest = open_[0]
        if demand[smallest] > level:
            shares[open_] = level
            break
        shares[smallest] = demand[smallest]
        left -= demand[smallest]
        open_.pop(0)
    return shares


def _service(rows: pd.DataFrame) -> float:
    return float(SERVICE_INPUT_WEIGHT * rows["prompt_tokens"].sum()
                 + SERVICE_OUTPUT_WEIGHT * rows["output_tokens"].sum())


def tenant_service(requests: pd.DataFrame, measured: np.ndarray,
                   num_tenants: int) -> tuple[np.ndarray, np.ndarray]:
    """(demand, service) per tenant in weighted tokens (see the module docstring)."""
    rows = requests[measured]
    cutoff = float(rows["arrival_s"].max()) if len(rows) else 0.0
    served = rows[rows["finished"].to_numpy() & (rows["finish_s"].to_numpy() <= cutoff)]
    demand = np.array([_service(rows[rows["tenant"] == t]) for t in range(num_tenants)])
    service = np.array([_service(served[served["tenant"] == t]) for t in range(num_tenants)])
    return demand, service


def fair_share_jain(demand: np.ndarray, service: np.ndarray) -> float | None:
    """Jain's index of service over max-min fair shares, over tenants with demand."""
    active = demand > 0
    if active.sum() == 0:
        return None
    shares = max_min_shares(demand[active], float(service[active].sum()))
    if not (shares > 0).all():
        return None
    return jain_index(service[active] / shares)


def slowdown_by_prompt_bucket(done: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Slowdown distribution of finished requests per prompt-length bucket, keyed by its
    token range ("256-1023", "16384+"); empty buckets are left out."""
    prompt = done["prompt_tokens"].to_numpy()
    slowdown = done["slowdown"].to_numpy()
    edges = (*PROMPT_BUCKET_EDGES, None)
    buckets: dict[str, dict[str, object]] = {}
    for low, high in pairwise(edges):
        inside = (prompt >= low) & (prompt < high if high is not None else True)
        if inside.any():
            label = f"{low}+" if high is None else f"{low}-{high - 1}"
            buckets[label] = {"requests": int(inside.sum()), **distribution(slowdown[inside])}
    return buckets


def _one_tenant(rows: pd.DataFrame, info: TenantInfo, window: float) -> dict[str, object]:
    done = rows[rows["finished"].to_numpy()]
    good = int(meets_slo(rows, info.slo).sum())
    metrics: dict[str, object] = {name: distribution(done[name].to_numpy())
                                  for name in LATENCY_COLUMNS}
    metrics["slowdown"] = distribution(done["slowdown"].to_numpy())
    metrics.update({
        "measured_requests": len(rows),
        "completed": len(done),
        "rejected": len(rows) - len(done),
        "request_throughput_rps": len(done) / window,
        "output_throughput_tps": float(done["output_tokens"].sum()) / window,
        "goodput_rps": good / window,
        "slo_attainment": good / len(rows) if len(rows) else None,
        # Which class absorbed the overload: its preemptions and its rejections (shed ones
        # among them) against the SLO it was held to.
        "preemptions": int(rows["preemptions"].sum()),
        "rejected_by_reason": rejected_by_reason(rows, np.ones(len(rows), dtype=bool)),
    })
    return metrics


def tenant_slo_met(rows: pd.DataFrame, tenants: list[TenantInfo]) -> np.ndarray:
    """Whether each request met its own tenant's SLO (a rejection is a miss)."""
    met = np.zeros(len(rows), dtype=bool)
    tenant = rows["tenant"].to_numpy()
    for index, info in enumerate(tenants):
        mine = tenant == index
        met[mine] = meets_slo(rows[mine], info.slo)
    return met


def fairness_metrics(requests: pd.DataFrame, measured: np.ndarray, window: float,
                     tenants: list[TenantInfo]) -> dict[str, object]:
    """`tenants` (per-tenant metrics, by name), goodput and SLO attainment against each
    request's tenant SLO, and `fairness` (Jain's index, slowdown by prompt bucket) for one arm.
    `requests` needs `slowdown`."""
    rows = requests[measured]
    per_tenant = {info.name: _one_tenant(rows[rows["tenant"] == index], info, window)
                  for index, info in enumerate(tenants)}
    good = int(tenant_slo_met(rows, tenants).sum())
    demand, service = tenant_service(requests, measured, len(tenants))
    for info, d, s in zip(tenants, demand, service, strict=True):
        per_tenant[info.name].update({"demand_tokens": float(d), "served_tokens": float(s)})
    return {
        "tenants": per_tenant,
        "goodput_rps": good / window,
        "slo_attainment": good / len(rows) if len(rows) else None,
        "fairness": slowdown_fairness(
            rows, fair_share_jain(demand, service) if len(tenants) > 1 else None),
    }


def slowdown_fairness(rows: pd.DataFrame, jain_index: float | None) -> dict[str, object]:
    """`fairness` of the summary: Jain's index as given, and the slowdown of the finished
    requests among the measured `rows`, overall and by prompt bucket."""
    done = rows[rows["finished"].to_numpy()]
    return {
        "jain_index": jain_index,
        "slowdown": distribution(done["slowdown"].to_numpy()),
        "slowdown_by_prompt_bucket": slowdown_by_prompt_bucket(done),
    }
