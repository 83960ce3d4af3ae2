"""The plan's tables, as titles, headers and rows of text, from plan.json's document; the
console (rich) and plan.md (markdown) render the same tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from batchsim.apps.plan.bisect import MEETS_AT_HIGH, MISSES_AT_LOW
from batchsim.apps.plan.durations import latency_text
from batchsim.apps.plan.evaluate import DOES_NOT_FIT, FAILS, MEETS


@dataclass(frozen=True, slots=True)
class TextTable:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # said once under the table, not per row


def _number(value: Any, fmt: str, scale: float = 1.0, prefix: str = "") -> str:
    return "-" if value is None else prefix + format(value * scale, fmt)


def p99_cell(record: dict[str, Any], key: str) -> str:
    """The judged p99 of target `key`, in the unit that suits it (plan.json keeps an
    infinite p99, a rejected request's, as null)."""
    p99 = (record.get("p99") or {}).get(key)
    if p99 is None:
        return "-"
    if p99["judged"] is None:
        return "rejected" if record["status"] != DOES_NOT_FIT else "-"
    return latency_text(p99["judged"])


def max_rate_cell(entry: dict[str, Any]) -> str:
    status, answer = entry["status"], entry["answer"]
    if status == DOES_NOT_FIT:
        return "does not fit"
    if status == MISSES_AT_LOW:
        return f"< {entry['low']:g}"
    if status == MEETS_AT_HIGH:
        return f">= {answer:g}"
    return f"{answer:g}"


def max_rate_table(document: dict[str, Any]) -> TextTable | None:
    variants = [v for v in document["variants"] if v["max_rate"]]
    if not variants:
        return None
    arms: list[str] = []  # every variant's arms, in order (a what-if may change them)
    for variant in variants:
        arms += [e["arm"] for e in variant["max_rate"] if e["arm"] not in arms]
    rows = []
    for arm in arms:
        entries = [next((e for e in v["max_rate"] if e["arm"] == arm), None) for v in variants]
        rows.append([arm, *(max_rate_cell(e) if e else "-" for e in entries)])
    tolerance = variants[0]["max_rate"][0]["tolerance"]
    return TextTable(f"largest {document['load_parameter']} meeting the SLO "
                     f"(within {tolerance:g} below the boundary)",
                     ["arm", *(v["name"] for v in variants)], rows)


def max_rate_detail_table(variant: dict[str, Any]) -> TextTable:
    rows = []
    for entry in variant["max_rate"]:
        at = entry["at_answer"] or {}
        rows.append([entry["arm"], max_rate_cell(entry), _number(at.get("gpus"), ",.0f"),
                     _number(at.get("served_output_tps"), ",.0f"),
                     _number(at.get("tokens_per_s_per_gpu"), ",.0f"),
                     _number(at.get("tokens_per_s_per_user"), ",.1f"),
                     _number(at.get("usd_per_million_output_tokens"), ",.2f", prefix="$"),
                     p99_cell(at, "ttft_p99_s"), p99_cell(at, "tpot_p99_s"),
                     str(len(entry["steps"]))])
    return TextTable(f"{variant['name']}: at the largest load meeting the SLO",
                     ["arm", "load", "GPUs", "out tok/s", "tok/s/GPU", "tok/s/user",
                      "$/M out tok", "TTFT p99", "TPOT p99", "steps"], rows)


def cheapest_table(document: dict[str, Any]) -> TextTable | None:
    variants = [v for v in document["variants"] if v["candidates"]]
    if not variants:
        return None
    rows = []
    for variant in variants:
        ranked = variant["candidates"]["ranked"]
        best = ranked[0] if ranked and ranked[0]["status"] == MEETS else None
        if best is None:
            rows.append([variant["name"], "none meets the SLO", *["-"] * 5])
            continue
        rows.append([variant["name"], best["label"], str(best["gpus"]),
                     _number(best["usd_per_hour"], ",.2f", prefix="$"),
                     _number(best["usd_per_million_output_tokens"], ",.2f", prefix="$"),
                     p99_cell(best, "ttft_p99_s"), p99_cell(best, "tpot_p99_s")])
    target = variants[0]["candidates"]["target_rate"]
    return TextTable(f"cheapest configuration meeting the SLO at {target:g}",
                     ["variant", "configuration", "GPUs", "$/hour", "$/M out tok",
                      "TTFT p99", "TPOT p99"], rows)


def _verdict(record: dict[str, Any], full: bool) -> str:
    """`meets`, or what it misses: in words (full) or as short labels (the console)."""
    status = str(record["status"])
    if status == FAILS:
        return f"{status}: " + ("; ".join(record["reasons"]) if full else
                                ", ".join(record["missed"]))
    if status == DOES_NOT_FIT and full:
        return f"{status}: {record['reasons'][0]}"
    return status


def does_not_fit_notes(rows: list[dict[str, Any]], what: str = "candidates") -> list[str]:
    """One line per distinct reason for not fitting, with the configurations it rules out:
    said per row, the same sentence would fill the table."""
    by_reason: dict[str, list[str]] = {}
    for row in rows:
        if row["status"] == DOES_NOT_FIT:
            by_reason.setdefault(row["reasons"][0], []).append(row["label"])
    notes = []
    for reason, labels in by_reason.items():
        count = f"{len(labels)} {what} do" if len(labels) > 1 else f"1 {what.rstrip('s')} does"
        notes.append(f"{count} not fit ({', '.join(labels)}): {reason}")
    return notes


def ranked_table(variant: dict[str, Any], limit: int | None = None,
                 full: bool = True) -> TextTable:
    """The candidates that fit, best first; those that do not fit are grouped by reason in
    the notes (they rank last anyway)."""
    everything = variant["candidates"]["ranked"]
    ranked = [row for row in everything if row["status"] != DOES_NOT_FIT]
    shown = ranked if limit is None else ranked[:limit]
    rows = [[str(row["rank"]), row["label"], str(row["gpus"]),
             _number(row["usd_per_hour"], ",.2f", prefix="$"),
             _number(row["usd_per_million_output_tokens"], ",.2f", prefix="$"),
             p99_cell(row, "ttft_p99_s"), p99_cell(row, "tpot_p99_s"), _verdict(row, full)]
            for row in shown]
    more = "" if len(shown) == len(ranked) else f" (first {len(shown)} of {len(ranked)})"
    return TextTable(f"{variant['name']}: candidates ranked{more}",
                     ["#", "configuration", "GPUs", "$/hour", "$/M out tok", "TTFT p99",
                      "TPOT p99", "verdict"], rows, does_not_fit_notes(everything))


def _percent(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


def fleets_table(variant: dict[str, Any], full: bool = True) -> TextTable:
    """The fleets on the file's own traffic: what each paid and how well it served."""
    rows = [[str(row["rank"]), row["label"], _number(row["gpu_hours"], ",.3f"),
             _number(row["usd"], ",.2f", prefix="$"),
             _number(row["usd_per_million_output_tokens"], ",.2f", prefix="$"),
             _number(row["replicas_paid_mean"], ",.2f"), _percent(row["slo_attainment"]),
             p99_cell(row, "ttft_p99_s"), p99_cell(row, "tpot_p99_s"), _verdict(row, full)]
            for row in variant["autoscaling"]["ranked"]]
    return TextTable(f"{variant['name']}: fixed and autoscaled fleets on the file's traffic, "
                     "ranked",
                     ["#", "configuration", "GPU-hours", "$ paid", "$/M out tok",
                      "replicas paid, mean", "SLO attainment", "TTFT p99", "TPOT p99",
                      "verdict"], rows)


def front_table(variant: dict[str, Any]) -> TextTable:
    rows = [[p["label"], str(p["gpus"]), format(p["tokens_per_s_per_gpu"], ",.0f"),
             format(p["tokens_per_s_per_user"], ",.1f")]
            for p in variant["pareto"]["front"]]
    return TextTable(f"{variant['name']}: Pareto front (configurations meeting the SLO)",
                     ["configuration", "GPUs", "out tok/s per GPU", "tok/s per user"], rows)


def all_tables(document: dict[str, Any], ranked_limit: int | None = None,
               full: bool = True) -> list[TextTable]:
    """Every table; `ranked_limit` rows of each ranking, reasons in words when `full`."""
    tables = [t for t in (max_rate_table(document), cheapest_table(document)) if t is not None]
    for variant in document["variants"]:
        if variant["max_rate"]:
            tables.append(max_rate_detail_table(variant))
        if variant["candidates"]:
            tables.append(ranked_table(variant, ranked_limit, full))
        if variant.get("autoscaling"):
            tables.append(fleets_table(variant, full))
        if variant["max_rate"] or variant["candidates"]:  # fleets are not on the front
            tables.append(front_table(variant))
    return tables
