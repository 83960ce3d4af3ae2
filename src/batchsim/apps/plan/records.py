"""The plan as plain data (plan.json): every evaluation, every bisection step, the answers.

Nothing here depends on the machine, the clock or what was resumed, so the same plan gives
the same document.
"""

from __future__ import annotations

from typing import Any

from batchsim.apps.plan.candidates import rank, served_tokens
from batchsim.apps.plan.cost import cost_per_hour, plan_prices, usd_per_million_tokens
from batchsim.apps.plan.evaluate import MEETS, Evaluation
from batchsim.apps.plan.fleet_records import fleet_row, rank_fleets
from batchsim.apps.plan.max_rate import MaxRateSearch
from batchsim.apps.plan.objective import resolve_objective
from batchsim.apps.plan.pareto import pareto_front, pareto_points
from batchsim.apps.plan.planner import PlanResult, VariantPlan
from batchsim.apps.plan.runs import TtftTrend
from batchsim.experiment.outputs import json_safe


def evaluation_record(evaluation: Evaluation, prices: dict[str, float]) -> dict[str, Any]:
    setup = evaluation.setup
    per_hour = cost_per_hour(setup.gpus_by_hardware, prices)
    tokens = served_tokens(evaluation)
    tpot = evaluation.metric("tpot_s", "mean")
    runs = evaluation.runs
    return {
        "label": setup.label, "arm": setup.arm, "load": setup.load, "folder": setup.folder,
        "deployment": setup.deployment, "gpus": setup.gpus,
        "gpus_by_hardware": setup.gpus_by_hardware, "usd_per_hour": per_hour,
        "usd_per_million_output_tokens": usd_per_million_tokens(per_hour, tokens),
        "joules_per_output_token": evaluation.metric("energy", "joules_per_output_token"),
        "status": evaluation.status, "reasons": evaluation.reasons,
        "missed": evaluation.verdict.missed if evaluation.verdict else None,
        "p99": evaluation.verdict.p99 if evaluation.verdict else None,
        "kept_up": evaluation.verdict.kept_up if evaluation.verdict else None,
        "ttft_trend": [_trend_record(r.ttft_trend) for r in runs],
        "rejected_fraction": [r.rejected / r.measured if r.measured else None for r in runs],
        "served_output_tps": evaluation.served_output_tps,
        "tokens_per_s_per_gpu": tokens / setup.gpus if tokens is not None else None,
        "tokens_per_s_per_user": 1.0 / tpot if tpot else None,
        "metrics": evaluation.metrics, "ci95": evaluation.ci95,
    }


def _trend_record(trend: TtftTrend | None) -> dict[str, float] | None:
    if trend is None:
        return None
    return {"early_arrival_s": trend.early_arrival_s, "early_ttft_s": trend.early_ttft_s,
            "late_arrival_s": trend.late_arrival_s, "late_ttft_s": trend.late_ttft_s,
            "growth_per_s": trend.growth_per_s}


def max_rate_record(search: MaxRateSearch, prices: dict[str, float]) -> dict[str, Any]:
    bisection = search.bisection
    at_answer = search.answer_evaluation
    return {
        "arm": search.arm, "status": search.status, "answer": bisection.answer,
        "bracket": [bisection.passing, bisection.failing],
        "low": bisection.low, "high": bisection.high, "tolerance": bisection.tolerance,
        "does_not_fit": search.does_not_fit,
        "at_answer": evaluation_record(at_answer, prices) if at_answer else None,
        "steps": [evaluation_record(e, prices) for e in search.evaluations],
    }


def candidates_record(variant_plan: VariantPlan, target: float | None,
                      prices: dict[str, float], objective: str) -> dict[str, Any] | None:
    if variant_plan.candidates is None:
        return None
    evaluations = variant_plan.candidates.evaluations
    ranked = rank(evaluations, prices, objective)
    by_label = {e.setup.label: e for e in evaluations}
    rows = [{**row, **evaluation_record(by_label[row["label"]], prices), "rank": row["rank"]}
            for row in ranked]
    best = rows[0] if rows and rows[0]["status"] == MEETS else None
    return {"target_rate": target, "objective": objective,
            "answer": best["label"] if best else None, "ranked": rows}


def fleets_record(variant_plan: VariantPlan, prices: dict[str, float],
                  objective: str) -> dict[str, Any]:
    """The fleets on the file's own traffic, ranked (plan.autoscaling)."""
    assert variant_plan.fleets is not None
    rows = [{**evaluation_record(e, prices), **fleet_row(e, prices)}
            for e in variant_plan.fleets.evaluations]
    ranked = rank_fleets(rows, objective)
    best = ranked[0] if ranked and ranked[0]["status"] == MEETS else None
    return {"objective": objective, "answer": best["label"] if best else None,
            "ranked": ranked}


def all_evaluations(variant_plan: VariantPlan) -> list[Evaluation]:
    evaluations = [e for search in variant_plan.max_rate for e in search.evaluations]
    if variant_plan.candidates is not None:
        evaluations += variant_plan.candidates.evaluations
    return evaluations


def pareto_record(variant_plan: VariantPlan) -> dict[str, Any]:
    points = pareto_points(all_evaluations(variant_plan))
    return {"points": [p.as_dict() for p in points],
            "front": [p.as_dict() for p in pareto_front(points)]}


def plan_document(result: PlanResult, versions: dict[str, str]) -> dict[str, Any]:
    prices = plan_prices(result.exp, result.plan)
    objective = resolve_objective(result.plan, prices)
    variants: list[dict[str, Any]] = []
    for variant_plan in result.variants:
        variant = variant_plan.variant
        variants.append({
            "name": variant.name,
            "set": list(variant.overrides[len(result.variants[0].variant.overrides):]),
            "folder": variant.folder,
            "max_rate": [max_rate_record(s, prices) for s in variant_plan.max_rate],
            "candidates": candidates_record(variant_plan, result.plan.target_rate, prices,
                                            objective),
            "pareto": pareto_record(variant_plan),
        })
        if variant_plan.fleets is not None:  # only when asked: other plans keep their bytes
            variants[-1]["autoscaling"] = fleets_record(variant_plan, prices, objective)
    return json_safe({
        "config": result.exp.model_dump(mode="json"),
        "versions": versions,
        "slo": result.slo.model_dump(mode="json"),
        "load_parameter": result.parameter,
        "replications": len(result.seeds), "seeds": result.seeds,
        "answer": {
            "max_rate": {v["name"]: {m["arm"]: m["answer"] for m in v["max_rate"]}
                         for v in variants},
            "cheapest": {v["name"]: (v["candidates"] or {}).get("answer") for v in variants},
            **({"autoscaling": {v["name"]: v["autoscaling"]["answer"] for v in variants}}
               if result.plan.autoscaling is not None else {}),
        },
        "variants": variants,
    })
