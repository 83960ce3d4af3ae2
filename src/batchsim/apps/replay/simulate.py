"""Simulate each measured case and put the prediction beside the measurement."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import pandas as pd

from batchsim.apps.api import (
    ArmError,
    ConfigError,
    EngineProfileError,
    HardwareError,
    ModelDoesNotFitError,
    ModelError,
    WorkloadError,
    run,
)
from batchsim.apps.replay.client_figures import client_figures
from batchsim.apps.replay.deployment import (
    REPLAY_ARM,
    BenchmarkClient,
    case_experiment,
    lengths_csv,
)
from batchsim.apps.replay.measured import MeasuredCase, Unreplayed
from batchsim.experiment.engine_profile import (
    EngineProfile,
    list_engine_profiles,
    load_engine_profile,
)
from batchsim.experiment.runner import ArmResult
from batchsim.metrics.summary import weighted_distribution

_CANNOT_RUN = (ArmError, ConfigError, EngineProfileError, HardwareError, ModelDoesNotFitError,
               ModelError, WorkloadError)


@dataclass(frozen=True, slots=True)
class ReplayedCase:
    """A measured case and what the simulation predicts for it, over the measured requests
    (every one after the client's warm-up)."""

    case: MeasuredCase
    ttft_s: float  # simulated mean time to first token
    tpot_s: float  # simulated mean time per output token
    preemptions: int
    engine_profile: str  # the engine profile it ran with
    # Every client figure of the simulated run (client_figures.FIGURES names).
    simulated: Mapping[str, float] = field(default_factory=dict)


class EngineChoice:
    """Which engine profile each case runs with: its own engine's (a shipped profile of that
    name, else `none`), unless `profiles` names one for its engine or for every engine (`*`)."""

    def __init__(self, profiles: Mapping[str, str] | None = None) -> None:
        self.profiles = dict(profiles or {})
        self._loaded: dict[str, EngineProfile] = {}

    def for_case(self, case: MeasuredCase) -> EngineProfile:
        ref = self.profiles.get(case.engine, self.profiles.get("*", case.engine))
        if ref not in self._loaded:
            # Only an engine with no shipped profile runs the bare roofline: a profile the user
            # named, or a shipped one, must load (a broken file is an error, not a fallback).
            shipped = ref != case.engine or ref.strip().lower() in list_engine_profiles()
            self._loaded[ref] = load_engine_profile(ref if shipped else "none")
        return self._loaded[ref]


def replay_cases(cases: Sequence[MeasuredCase], client: BenchmarkClient,
                 engine_for: Callable[[MeasuredCase], EngineProfile],
                 on_case: Callable[[int], None] | None = None, jobs: int = 1,
                 ) -> tuple[list[ReplayedCase], list[Unreplayed]]:
    """Every case simulated with its engine profile, or the reason it could not be; `jobs`
    processes at once (the results do not depend on it: each case is its own simulation)."""
    work = [(case, client, engine_for(case)) for case in cases]
    outcomes: list[ReplayedCase | str] = []
    with ExitStack() as stack:
        mapped: Iterable[ReplayedCase | str] = map(_replay_packed, work)
        if jobs > 1 and len(work) > 1:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=jobs))
            mapped = pool.map(_replay_packed, work, chunksize=2)
        for outcome in mapped:
            outcomes.append(outcome)
            if on_case is not None:
                on_case(len(outcomes))
    replayed: list[ReplayedCase] = []
    skipped: list[Unreplayed] = []
    for case, outcome in zip(cases, outcomes, strict=True):
        if isinstance(outcome, str):
            skipped.append(Unreplayed(case.case_id, case.source, case.engine, case.model,
                                      case.gpu, outcome))
        else:
            replayed.append(outcome)
    return replayed, skipped


def _replay_packed(item: tuple[MeasuredCase, BenchmarkClient, EngineProfile],
                   ) -> ReplayedCase | str:
    return replay_case(*item)


def replay_case(case: MeasuredCase, client: BenchmarkClient,
                engine: EngineProfile) -> ReplayedCase | str:
    """One case simulated, or why it cannot be (the error batchsim gives for its deployment)."""
    with TemporaryDirectory(prefix="batchsim-replay-") as folder:
        lengths_file = Path(folder) / "lengths.csv"
        if case.request_lengths:
            lengths_file.write_text(lengths_csv(case), encoding="utf-8")
        experiment = case_experiment(case, client, engine, lengths_file)
        if isinstance(experiment, str):
            return experiment
        try:
            results = run(experiment, keep_token_gaps=True)
        except _CANNOT_RUN as err:
            return str(err).splitlines()[0]
    [arm] = [arm for arm in results.result.arms if arm.name == REPLAY_ARM]
    requests = arm.requests.sort_values("arrival_s", kind="stable")
    measured = requests.iloc[client.warmup(case):]
    unfinished = int((~measured["finished"]).sum())
    if unfinished:
        first = measured.loc[~measured["finished"], "reject_reason"].iloc[0]
        return f"{unfinished} simulated request(s) not served: {first}"
    figures = measured_figures(arm, measured)
    return ReplayedCase(case, figures["ttft_mean"], figures["tpot_mean"],
                        int(requests["preemptions"].sum()), engine.ref, figures)


def measured_figures(arm: ArmResult, measured: pd.DataFrame) -> dict[str, float]:
    """The client figures of the `measured` requests of `arm` (run with its token gaps)."""
    assert arm.token_gaps is not None, "the arm was run without keeping its token gaps"
    counted = np.zeros(len(arm.requests), dtype=bool)
    counted[measured["request_id"].to_numpy()] = True
    gaps = weighted_distribution(*arm.token_gaps.values_and_weights(counted))
    return client_figures(measured, gaps)
