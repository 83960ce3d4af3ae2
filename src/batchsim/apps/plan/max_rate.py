"""The max-rate question: for each arm on the experiment's deployment, bisect the load to the
largest value that meets the SLO (`bisect.RateBisection`), one midpoint per round."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from batchsim.apps.plan.bisect import RateBisection
from batchsim.apps.plan.evaluate import DOES_NOT_FIT, Evaluation
from batchsim.apps.plan.setups import Setup, Variant, make_setup, safe_name, yaml_value
from batchsim.experiment.schema import PlanRateConfig, SLOConfig


@dataclass(slots=True)
class MaxRateSearch:
    file: Path
    variant: Variant
    arm: str
    slo: SLOConfig
    rate: PlanRateConfig
    bisection: RateBisection = field(init=False)
    evaluations: list[Evaluation] = field(default_factory=list)  # in the order evaluated
    does_not_fit: str | None = None

    def __post_init__(self) -> None:
        self.bisection = RateBisection(self.rate.low, self.rate.high, self.rate.tolerance)

    def pending(self) -> list[Setup]:
        if self.does_not_fit is not None:
            return []
        return [self._setup(load) for load in self.bisection.next_loads()]

    def _setup(self, load: float) -> Setup:
        key = self.rate.parameter.rsplit(".", 1)[-1]
        folder = f"max-rate/{safe_name(self.arm)}/{safe_name(f'{key}={yaml_value(load)}')}"
        return make_setup(self.file, self.variant, self.slo, self.arm, self.rate.parameter,
                          load, {}, folder, f"{self.arm} @ {load:g}")

    def record(self, evaluation: Evaluation) -> None:
        self.evaluations.append(evaluation)
        if evaluation.status == DOES_NOT_FIT:
            self.does_not_fit = evaluation.reasons[0]
            return
        assert evaluation.setup.load is not None  # a bisection step always sets the load
        self.bisection.record(evaluation.setup.load, evaluation.meets)

    @property
    def status(self) -> str:
        return DOES_NOT_FIT if self.does_not_fit is not None else self.bisection.status

    @property
    def answer_evaluation(self) -> Evaluation | None:
        """The run at the answer (the highest load that met the SLO)."""
        answer = self.bisection.answer
        if self.does_not_fit is not None or answer is None:
            return None
        return next(e for e in self.evaluations if e.setup.load == answer)
