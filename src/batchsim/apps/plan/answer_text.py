"""The plan's answer in words, from plan.json's document: how many GPUs, which layout, at
what cost, the largest load one deployment serves, the runner-up and each what-if's answer.

The console, plan.md and report.html all lead with these sentences, so the three say the
same thing; every number in them is one of the document's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchsim.apps.plan.durations import latency_text
from batchsim.apps.plan.evaluate import MEETS
from batchsim.apps.plan.tables import max_rate_cell

_BEST_BY = {"cost": "cheapest", "gpus": "smallest", "energy": "most energy-efficient"}
_SLO_LABELS = {"ttft_p99_s": "TTFT", "tpot_p99_s": "TPOT", "e2e_p99_s": "E2E"}


@dataclass(frozen=True, slots=True)
class PlanAnswer:
    sentences: list[str]  # the base variant's answer, the answer itself first
    what_ifs: list[str]  # one sentence per what-if

    @property
    def headline(self) -> str:
        """The base variant's answer as one paragraph."""
        return " ".join(self.sentences)


def slo_text(slo: dict[str, Any]) -> str:
    """`p99 TTFT ≤ 2 s and p99 TPOT ≤ 100 ms`."""
    return " and ".join(f"p99 {_SLO_LABELS.get(key, key)} ≤ {latency_text(value)}"
                        for key, value in slo.items() if value is not None)


def load_text(document: dict[str, Any], value: float) -> str:
    """A load as the reader set it: `16 req/s` for the arrival rate, else `key = value`."""
    parameter = str(document["load_parameter"])
    if parameter.endswith("arrivals.rate"):
        return f"{value:g} req/s"
    return f"{parameter} = {value:g}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("s" if count != 1 else "")


def _layout(deployment: dict[str, Any]) -> str | None:
    """`2 replicas × TP4`, for a colocated deployment (a split's label says its pools)."""
    if "replicas" not in deployment or "tensor_parallel" not in deployment:
        return None
    parallel = f"TP{deployment['tensor_parallel']}"
    if deployment.get("pipeline_parallel", 1) != 1:
        parallel += f" PP{deployment['pipeline_parallel']}"
    return f"{_plural(int(deployment['replicas']), 'replica')} × {parallel}"


def _configuration(row: dict[str, Any]) -> str:
    """`sarathi h100-sxm tp4 x2 (8 GPUs as 2 replicas × TP4, $24.00/hour, $1.63 per million
    output tokens)`."""
    gpus = _plural(int(row["gpus"]), "GPU")
    layout = _layout(row.get("deployment") or {})
    gpus += f" as {layout}" if layout else ""
    parts = [gpus, f"{_money(row['usd_per_hour'])}/hour"] if row.get("usd_per_hour") else [gpus]
    if row.get("usd_per_million_output_tokens") is not None:
        parts.append(f"{_money(row['usd_per_million_output_tokens'])} per million output "
                     "tokens")
    return f"{row['label']} ({', '.join(parts)})"


def _p99s(row: dict[str, Any]) -> str:
    judged = [f"{_SLO_LABELS.get(key, key)} {latency_text(p99['judged'])}"
              for key, p99 in (row.get("p99") or {}).items() if p99.get("judged") is not None]
    return ", ".join(judged)


def _cheapest_sentences(document: dict[str, Any], variant: dict[str, Any]) -> list[str]:
    candidates = variant["candidates"]
    if not candidates:
        return []
    target = load_text(document, candidates["target_rate"])
    ranked = candidates["ranked"]
    meeting = [row for row in ranked if row["status"] == MEETS]
    if not meeting:
        return [f"No candidate meets {slo_text(document['slo'])} at {target} "
                f"({len(ranked)} tried): widen the candidates."]
    best = meeting[0]
    best_by = _BEST_BY.get(candidates["objective"], "best")
    sentences = [f"To serve {target} under {slo_text(document['slo'])}, the {best_by} "
                 f"configuration is {_configuration(best)}, with judged p99s of "
                 f"{_p99s(best)}."]
    if len(meeting) > 1:
        sentences.append(f"Runner-up: {_configuration(meeting[1])}.")
    sentences.append(f"{len(meeting)} of {len(ranked)} candidates meet the SLO.")
    return sentences


def _max_rate_sentence(document: dict[str, Any], variant: dict[str, Any]) -> str | None:
    entries = variant["max_rate"]
    if not entries:
        return None
    config = document["config"]
    gpus = (int(config.get("replicas", 1)) * int(config.get("tensor_parallel", 1))
            * int(config.get("pipeline_parallel", 1)))
    layout = _layout({"replicas": config.get("replicas", 1),
                      "tensor_parallel": config.get("tensor_parallel", 1),
                      "pipeline_parallel": config.get("pipeline_parallel", 1)})
    where = f"the file's deployment ({layout} on {config.get('hardware')}, {_plural(gpus, 'GPU')})"
    cells = [f"{entry['arm']} {_rate_phrase(document, entry)}" for entry in entries]
    return f"The largest load meeting the SLO on {where}: {', '.join(cells)}."


def _rate_phrase(document: dict[str, Any], entry: dict[str, Any]) -> str:
    cell = max_rate_cell(entry)
    if entry["answer"] is None or not cell[-1].isdigit():
        return cell
    return cell.removesuffix(f"{entry['answer']:g}") + load_text(document, entry["answer"])


def _fleet_sentence(variant: dict[str, Any]) -> str | None:
    fleets = variant.get("autoscaling")
    if not fleets:
        return None
    meeting = [row for row in fleets["ranked"] if row["status"] == MEETS]
    if not meeting:
        return "No fleet meets the SLO on the file's own traffic."
    best = meeting[0]
    return (f"On the file's own traffic the best fleet is {best['label']}, paying "
            f"{_money(best['usd'])} for {best['gpu_hours']:,.3f} GPU-hours.")


def _what_if_sentence(document: dict[str, Any], variant: dict[str, Any]) -> str:
    change = ", ".join(variant["set"])
    parts = []
    candidates = variant["candidates"]
    if candidates:
        best = next((r for r in candidates["ranked"] if r["status"] == MEETS), None)
        parts.append(_configuration(best) if best else "no candidate meets the SLO")
    if variant["max_rate"]:
        parts.append("max load " + ", ".join(f"{e['arm']} {_rate_phrase(document, e)}"
                                            for e in variant["max_rate"]))
    fleet = _fleet_sentence(variant)
    if fleet:
        parts.append(fleet.rstrip("."))
    return f"{variant['name']} ({change}): " + "; ".join(parts) + "."


def plan_answer(document: dict[str, Any]) -> PlanAnswer:
    base, *what_ifs = document["variants"]
    sentences = _cheapest_sentences(document, base)
    sentences += [s for s in (_max_rate_sentence(document, base), _fleet_sentence(base)) if s]
    return PlanAnswer(sentences, [_what_if_sentence(document, variant) for variant in what_ifs])
