"""Fit an engine's costs to measured benchmarks by simulating them (docs/background/engines.md).

The unknowns are the profile's six costs θ = (front-end latency, serial front-end time, step
overhead, per-sequence overhead, streaming time per message, compute scale), or those of them
the caller frees; the others keep the base profile's values. Every prediction is a full
simulation of a case, so the fit is Gauss-Newton on simulations: each iteration measures the
sensitivity of every case's mean TTFT and TPOT to each cost by finite differences, solves the
least-squares problem of the log errors on that linear model (scipy's bounded trust-region
solver), and simulates the step, halving it until the simulated error falls; it stops when the
costs stop moving or no step helps, even with sensitivities measured over wider moves.
Held-out cases are simulated only at the end, with the fitted costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from batchsim.apps.engine_fit.settings import MAX_ITERATIONS, PARAMETERS
from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.measured import MeasuredCase, Unreplayed
from batchsim.apps.replay.simulate import ReplayedCase, replay_cases
from batchsim.experiment.engine_profile import EngineProfile, load_engine_profile

# The scale of each cost: what a finite difference and the solver measure moves against.
_SCALES = np.array([0.02, 2e-3, 5e-4, 2e-5, 2e-5, 0.1])
# Costs before the fit when the base profile has none: no front-end latency, the GPU
# profiles' per-step priors, the operator tables' compute times. (A streaming cost of 0
# starts from the cases instead: `_stream_start`.)
_START = np.array([0.0, 0.0, 2e-4, 2e-6, 0.0, 1.0])
_STREAM = PARAMETERS.index("frontend_stream_s")
# The least each cost may be: none below zero, and kernels no faster than a tenth of the
# tables' time (a scale of 0 would be infinitely fast kernels).
_LOWER = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.1])
# Each finite difference moves a cost by a tenth of its value (a tenth of its scale above,
# when it is smaller): the responses bend over larger moves.
_RELATIVE_STEP = 0.1
# When no step along the linear model lowers the error, the sensitivities are measured once
# more over moves this many times wider before the fit gives up: an engine's CUDA-graph sizes
# make step times jump where a step's token count crosses a captured size, and a narrow
# difference can straddle one such jump rather than follow the trend.
_WIDER_STEP = 3.0
SERIAL_STARTS = (0.01,)  # `--serial-starts` of the command
_HALVINGS = 4
_CONVERGED = 0.05  # stop when no cost moves by more than this share of its scale
# The log error past which a case weighs less than squared (scipy's soft_l1 loss): the target
# is the median error, and cases the model cannot represent should not pull every other case.
LOG_ERROR_SCALE = float(np.log(1.25))


class EngineFitError(ValueError):
    """Nothing to fit on (no case of the engine could be simulated), or no cost to fit."""


def free_costs(names: Sequence[str]) -> tuple[str, ...]:
    """The costs of `names` in PARAMETERS' order; an unknown or repeated name, or none, is an
    error naming what is accepted."""
    unknown = [name for name in names if name not in PARAMETERS]
    if unknown:
        raise EngineFitError(f"--costs: {unknown[0]!r} is not a fitted cost; expected some of "
                             f"{', '.join(PARAMETERS)}")
    if not names or len(set(names)) != len(names):
        raise EngineFitError("--costs: expected one or more different costs, got "
                             f"{', '.join(names) or 'none'}")
    return tuple(name for name in PARAMETERS if name in names)


@dataclass(frozen=True, slots=True)
class EngineFit:
    """The fitted costs and the cases they were fitted on and tested on."""

    costs: dict[str, float]  # the fitted ones
    fitted: list[ReplayedCase]  # simulated with the fitted costs
    held_out: list[ReplayedCase]
    unreplayed: list[Unreplayed]
    iterations: int
    fitted_costs: tuple[str, ...] = PARAMETERS  # the others kept the base profile's values


def fit_engine(base: EngineProfile, fit_cases: Sequence[MeasuredCase],
               held_out_cases: Sequence[MeasuredCase], client: BenchmarkClient, workdir: Path,
               *, jobs: int = 1, on_stage: Callable[[str], None] | None = None,
               serial_starts: Sequence[float] = SERIAL_STARTS,
               max_iterations: int = MAX_ITERATIONS,
               free: Sequence[str] = PARAMETERS) -> EngineFit:
    """Fit the `free` costs of `base` (the others keep its values) on `fit_cases` from its own
    costs and from each serial front-end time of `serial_starts` (when that cost is free),
    keep the fit with the least error on them, and score it on `held_out_cases`."""
    say = on_stage or (lambda _: None)
    fitted_costs = free_costs(free)
    freed = np.array([name in fitted_costs for name in PARAMETERS])
    if not freed[1]:
        serial_starts = ()
    simulate = _Simulator(base, client, workdir, jobs, freed)
    say(f"simulating {len(fit_cases)} cases at the start")
    start = _start(base, fit_cases, stream_free=bool(freed[_STREAM]))
    first = simulate(fit_cases, start)
    cases = [r.case for r in first.replayed]
    if not cases:
        raise EngineFitError(f"none of the {len(fit_cases)} cases to fit could be simulated")
    measured = np.array([[c.ttft_s, c.tpot_s] for c in cases])
    best: tuple[float, np.ndarray, list[ReplayedCase], int] | None = None
    for number, theta in enumerate(_starts(start, serial_starts), start=1):
        say(f"start {number}: " + _named(theta))
        latest = first.replayed if number == 1 else _aligned(simulate(cases, theta).replayed,
                                                             cases)
        found = _descend(simulate, cases, measured, theta, latest, say, max_iterations, freed)
        if best is None or found[0] < best[0]:
            best = found
    assert best is not None  # the first start always runs
    _, theta, latest, iterations = best
    say(f"simulating {len(held_out_cases)} held-out cases")
    held_out = simulate(held_out_cases, theta)
    costs = {n: _rounded(v) for n, v, f in zip(PARAMETERS, theta, freed, strict=True) if f}
    return EngineFit(costs, latest, held_out.replayed,
                     [*first.unreplayed, *held_out.unreplayed], iterations, fitted_costs)


def _descend(simulate: _Simulator, cases: Sequence[MeasuredCase], measured: np.ndarray,
             theta: np.ndarray, latest: list[ReplayedCase], say: Callable[[str], None],
             max_iterations: int, freed: np.ndarray,
             ) -> tuple[float, np.ndarray, list[ReplayedCase], int]:
    """Gauss-Newton from `theta`, moving only the `freed` costs: (error, costs, their
    simulation, iterations)."""
    cost = _cost(_means(latest), measured)
    iterations, widen = 0, 1.0
    for iterations in range(1, max_iterations + 1):
        jacobian = _sensitivities(simulate, cases, theta, freed, widen)
        step = np.zeros_like(theta)
        step[freed] = _solve(_means(latest), theta[freed], jacobian[:, :, freed], measured,
                             _SCALES[freed], _LOWER[freed]) - theta[freed]
        for _ in range(_HALVINGS):  # backtrack until the simulated error does fall
            trial = _aligned(simulate(cases, theta + step).replayed, cases)
            trial_cost = _cost(_means(trial), measured)
            if trial_cost < cost:
                break
            step = step / 2
        else:
            if widen == 1.0:  # the narrow differences may have met a jump: look wider once
                widen = _WIDER_STEP
                continue
            break  # no step along the linear model improves the simulated error: done
        theta, latest, cost, widen = theta + step, trial, trial_cost, 1.0
        say(f"  iteration {iterations}: {_named(theta)} (robust log error {cost:.4g})")
        if np.max(np.abs(step) / _SCALES) < _CONVERGED:
            break
    return cost, theta, latest, iterations


def _named(theta: np.ndarray) -> str:
    return ", ".join(f"{n} {v:.4g}" for n, v in zip(PARAMETERS, theta, strict=True))


def _starts(start: np.ndarray, serial_starts: Sequence[float]) -> list[np.ndarray]:
    """The base profile's costs, then the same with each serial front-end time: the error has
    several minima along it (how far a wave of requests sent together is spread decides which
    steps they share)."""
    others = [np.where(np.arange(len(PARAMETERS)) == 1, serial, start)
              for serial in serial_starts if serial != start[1]]
    return [start, *others]


def _sensitivities(simulate: _Simulator, cases: Sequence[MeasuredCase], theta: np.ndarray,
                   freed: np.ndarray, widen: float = 1.0) -> np.ndarray:
    """d(mean TTFT, mean TPOT)/d(cost) per case, by central differences (one-sided at 0), for
    the `freed` costs (zero for the others, which are not simulated), over moves `widen` times
    the usual."""
    steps = widen * np.maximum(_RELATIVE_STEP * theta, _SCALES / 10)
    jacobian = np.zeros((len(cases), 2, len(PARAMETERS)))
    for j in np.flatnonzero(freed):
        up = _means(_aligned(simulate(cases, theta + steps * np.eye(len(PARAMETERS))[j])
                             .replayed, cases))
        low = np.maximum(theta - steps * np.eye(len(PARAMETERS))[j], _LOWER)
        down = _means(_aligned(simulate(cases, low).replayed, cases))
        jacobian[:, :, j] = (up - down) / (theta[j] + steps[j] - low[j])
    return jacobian


def _rounded(value: float) -> float:
    """Four significant digits (more than the data can tell apart); 0 below a nanosecond."""
    return 0.0 if value < 1e-9 else float(f"{value:.4g}")


def _cost(predicted: np.ndarray, measured: np.ndarray) -> float:
    """The solver's objective: soft_l1 of the log errors, 2 f² (√(1 + (r/f)²) − 1) summed."""
    ratio = np.log(predicted / measured) / LOG_ERROR_SCALE
    return float(np.sum(2 * LOG_ERROR_SCALE ** 2 * (np.sqrt(1 + ratio ** 2) - 1)))


@dataclass(frozen=True, slots=True)
class _Outcome:
    replayed: list[ReplayedCase]
    unreplayed: list[Unreplayed]


class _Simulator:
    """Simulates cases with `base` at given costs (the `freed` ones of a cost vector; the
    others are the base's): each is written as a profile file, so the simulation reads its
    engine exactly as a user's experiment would."""

    def __init__(self, base: EngineProfile, client: BenchmarkClient, workdir: Path,
                 jobs: int, freed: np.ndarray) -> None:
        self.base, self.client, self.workdir, self.jobs = base, client, workdir, jobs
        self.freed = freed
        self.count = 0

    def __call__(self, cases: Sequence[MeasuredCase], theta: np.ndarray) -> _Outcome:
        self.count += 1
        costs = {n: float(v) for n, v, f in zip(PARAMETERS, theta, self.freed, strict=True)
                 if f}
        profile = with_costs(self.base, costs)
        path = self.workdir / f"point-{self.count}.yaml"
        path.write_text(profile_yaml(profile.spec.model_dump(mode="json")), encoding="utf-8")
        engine = load_engine_profile(str(path))
        replayed, unreplayed = replay_cases(cases, self.client, lambda _: engine, jobs=self.jobs)
        return _Outcome(replayed, unreplayed)


def with_costs(base: EngineProfile, costs: dict[str, float]) -> EngineProfile:
    """`base` with its costs replaced."""
    spec = base.spec.model_copy(update={"costs": base.spec.costs.model_copy(update=costs)})
    return EngineProfile(spec, base.where, base.ref)


def profile_yaml(document: dict[str, object]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=96)


def _start(base: EngineProfile, cases: Sequence[MeasuredCase], *, stream_free: bool,
           ) -> np.ndarray:
    costs = base.spec.costs
    given = [getattr(costs, name) for name in PARAMETERS]
    start = np.array([default if value is None else value
                      for value, default in zip(given, _START, strict=True)])
    if stream_free and start[_STREAM] == 0.0:
        start[_STREAM] = _stream_start(cases)
    return start


def _stream_start(cases: Sequence[MeasuredCase]) -> float:
    """The largest streaming cost the cases allow: one message per output token at the highest
    output-token rate measured (its users' tokens over their cycle, first token and the gaps
    after it). At zero the cost would bind nowhere and its sensitivity be zero, so the fit
    could never move it; from here it falls to what the cases say."""
    rates = [c.concurrency * c.output_tokens / (c.ttft_s + (c.output_tokens - 1) * c.tpot_s)
             for c in cases if c.ttft_s > 0 and c.tpot_s > 0 and c.output_tokens > 1]
    return 1.0 / max(rates) if rates else 0.0


def _means(replayed: Sequence[ReplayedCase]) -> np.ndarray:
    return np.array([[r.ttft_s, r.tpot_s] for r in replayed])


def _aligned(replayed: Sequence[ReplayedCase], cases: Sequence[MeasuredCase],
             ) -> list[ReplayedCase]:
    """The outcomes of `cases`, in order; a case that simulated at the start but not at another
    cost vector cannot happen (costs do not change what fits), so it is an error."""
    by_id = {r.case.case_id: r for r in replayed}
    missing = [c.case_id for c in cases if c.case_id not in by_id]
    if missing:
        raise EngineFitError(f"case {missing[0]} simulated at the start but not at other costs")
    return [by_id[c.case_id] for c in cases]


def _solve(predicted: np.ndarray, theta: np.ndarray, jacobian: np.ndarray,
           measured: np.ndarray, scales: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """The costs minimising the robust log errors (`_cost`) on the linear model around
    `theta` (the costs being fitted, `scales` and `lower` bounds theirs)."""
    floor = 1e-3 * measured

    def log_errors(x: np.ndarray) -> np.ndarray:
        linear = predicted + np.einsum("nmp,p->nm", jacobian, x - theta)
        return np.log(np.maximum(linear, floor) / measured).ravel()

    solution = least_squares(log_errors, theta, bounds=(lower, np.inf), x_scale=scales,
                             loss="soft_l1", f_scale=LOG_ERROR_SCALE)
    return np.asarray(solution.x, dtype=float)
