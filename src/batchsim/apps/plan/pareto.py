"""The Pareto front of output tokens/s per GPU against tokens/s per user.

Every configuration the plan ran that meets the SLO (max-rate steps and candidates) is a
point: per GPU, output tokens served per second (`runs.served_output_tps`) / GPUs — what the
fleet produces for each GPU it pays for; per user, `1 / mean TPOT` — how fast one answer
streams once it has started. A point is on the front when no other point is at least as good
on both axes and better on one. Configurations that miss the SLO are left out: they do not
serve their load, so their tokens per GPU are not on offer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchsim.apps.plan.evaluate import Evaluation


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    label: str
    arm: str
    gpus: int
    load: float | None  # None: the file's own traffic
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    meets: bool

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "arm": self.arm, "gpus": self.gpus, "load": self.load,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tokens_per_s_per_user": self.tokens_per_s_per_user, "meets": self.meets}


def pareto_points(evaluations: list[Evaluation]) -> list[ParetoPoint]:
    """A point per configuration that meets the SLO (sorted by label)."""
    points = []
    for evaluation in evaluations:
        tokens = evaluation.served_output_tps
        tpot = evaluation.metric("tpot_s", "mean")
        if not evaluation.meets or tokens is None or not tpot or evaluation.setup.gpus == 0:
            continue
        setup = evaluation.setup
        points.append(ParetoPoint(setup.label, setup.arm, setup.gpus, setup.load,
                                  tokens / setup.gpus, 1.0 / tpot, evaluation.meets))
    return sorted(points, key=lambda p: p.label)


def pareto_front(points: list[ParetoPoint]) -> list[ParetoPoint]:
    """The non-dominated points among those that meet the SLO, by tokens/s per user."""
    feasible = sorted((p for p in points if p.meets),
                      key=lambda p: (-p.tokens_per_s_per_gpu, -p.tokens_per_s_per_user, p.label))
    front: list[ParetoPoint] = []
    for point in feasible:  # best per-GPU first: keep each that is faster per user
        if not front or point.tokens_per_s_per_user > front[-1].tokens_per_s_per_user:
            front.append(point)
    return sorted(front, key=lambda p: p.tokens_per_s_per_user)
