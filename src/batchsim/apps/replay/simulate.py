"""Simulate each measured case and put the prediction beside the measurement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from batchsim.apps.api import (
    ArmError,
    ConfigError,
    HardwareError,
    ModelDoesNotFitError,
    ModelError,
    WorkloadError,
    run,
)
from batchsim.apps.replay.deployment import REPLAY_ARM, case_experiment
from batchsim.apps.replay.measured import MeasuredCase, Unreplayed

_CANNOT_RUN = (ArmError, ConfigError, HardwareError, ModelDoesNotFitError, ModelError,
               WorkloadError)


@dataclass(frozen=True, slots=True)
class ReplayedCase:
    """A measured case and what the simulation predicts for it."""

    case: MeasuredCase
    ttft_s: float  # simulated mean time to first token
    tpot_s: float  # simulated mean time per output token
    preemptions: int


def replay_cases(cases: Sequence[MeasuredCase], requests_per_user: int,
                 on_case: Callable[[int], None] | None = None,
                 ) -> tuple[list[ReplayedCase], list[Unreplayed]]:
    """Every case simulated, or the reason it could not be."""
    replayed: list[ReplayedCase] = []
    skipped: list[Unreplayed] = []
    for done, case in enumerate(cases, start=1):
        outcome = replay_case(case, requests_per_user)
        if isinstance(outcome, str):
            skipped.append(Unreplayed(case.case_id, case.source, case.engine, case.model,
                                      case.gpu, outcome))
        else:
            replayed.append(outcome)
        if on_case is not None:
            on_case(done)
    return replayed, skipped


def replay_case(case: MeasuredCase, requests_per_user: int) -> ReplayedCase | str:
    """One case simulated, or why it cannot be (the error batchsim gives for its deployment)."""
    experiment = case_experiment(case, requests_per_user)
    if isinstance(experiment, str):
        return experiment
    try:
        results = run(experiment)
    except _CANNOT_RUN as err:
        return str(err).splitlines()[0]
    [metrics] = [arm.metrics for arm in results.result.arms if arm.name == REPLAY_ARM]
    ttft, tpot = metrics["ttft_s"], metrics["tpot_s"]
    assert isinstance(ttft, dict) and isinstance(tpot, dict)
    return ReplayedCase(case, float(ttft["mean"]), float(tpot["mean"]),
                        int(metrics.get("preemptions", 0)))  # type: ignore[call-overload]
