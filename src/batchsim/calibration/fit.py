"""Fit a GPU profile's efficiencies to measured operator times and measure the held-out error.

Per family: hold out a seeded random fifth of the rows, fit that family's efficiency keys on the
rest by robust least squares on log(predicted / measured) — predicted by the simulator's own
`gpu.roofline` functions — from a few starting points, and report the absolute percentage error
on the held-out rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from batchsim.calibration.parameters import (
    FAMILY_PARAMETERS,
    FAMILY_SWITCHES,
    PREFILL_SHARED_LAUNCH,
    Parameter,
    round_significant,
    to_coordinate,
    to_value,
    with_family_values,
)
from batchsim.calibration.predict import PREDICTORS
from batchsim.calibration.solver import Solution, minimise
from batchsim.calibration.tables import FamilyTable
from batchsim.gpu.calibration_record import FAMILIES, CalibrationRecord, HeldOutError
from batchsim.gpu.hardware import MOE_KEYS, QUANT_KEYS, SM_TERMS, GpuProfile, RooflineEfficiency

METHOD = (
    "batchsim calibrate fit: per operator family, scipy least_squares (trf) with a soft-L1 "
    "loss (scale 0.1) on log(predicted / measured), best of several starts and of both "
    "settings of each yes/no key; predicted by batchsim.gpu.roofline"
)
ALWAYS_PRIOR = ("step_overhead_s", "per_seq_overhead_s")
"""Engine overheads (scheduling, sampling) that no operator microbenchmark measures."""


class FitError(ValueError):
    """Measurements that cannot support a fit (too few rows, say)."""


@dataclass(frozen=True, slots=True)
class FamilyFit:
    """One family's fitted keys and its held-out rows with their predictions."""

    family: str
    values: Mapping[str, float]  # yes/no keys (switches) as bools
    heldout: HeldOutError
    heldout_rows: pd.DataFrame  # measured `seconds` and `predicted`
    train_rows: int


@dataclass(frozen=True, slots=True)
class FitResult:
    """The fitted profile (efficiencies and calibration record) and the per-family details."""

    gpu: GpuProfile
    families: Mapping[str, FamilyFit]


def fit_profile(
    spec: GpuProfile,
    tables: Mapping[str, FamilyTable],
    *,
    seed: int = 0,
    holdout_fraction: float = 0.2,
) -> FitResult:
    """Fit every family present in `tables`; families without data keep `spec`'s values."""
    if not 0 < holdout_fraction < 1:
        raise FitError(f"holdout fraction must be in (0, 1), got {holdout_fraction}")
    eff = spec.efficiency
    fits: dict[str, FamilyFit] = {}
    for family in FAMILIES:
        if family not in tables:
            continue
        parameters = _parameters_for(
            family, decode_fitted="decode_attention" in fits, has_sms=spec.sm_count is not None
        )
        parameters = _told_apart(family, parameters, tables[family].rows)
        fit = _fit_family(spec, eff, tables[family], parameters, seed, holdout_fraction)
        eff = with_family_values(eff, family, fit.values)
        fits[family] = fit
    if not fits:
        raise FitError("no measurement tables to fit")
    fitted_keys = {key for fit in fits.values() for key in fit.values}
    record = CalibrationRecord(
        method=METHOD,
        seed=seed,
        holdout_fraction=holdout_fraction,
        sources=tuple(tables[family].source for family in fits),
        heldout_error={family: fit.heldout for family, fit in fits.items()},
        not_fitted=tuple(k for k in _efficiency_keys() if k not in fitted_keys),
    )
    eff = dataclasses.replace(eff, calibrated=True, note=_note(fits))
    gpu = dataclasses.replace(spec, efficiency=eff, calibration=record)
    return FitResult(gpu=gpu, families=fits)


def fit_families(
    fitted: GpuProfile, tables: Mapping[str, FamilyTable], families: tuple[str, ...]
) -> FitResult:
    """Fit only `families` into an already fitted profile; every other key and record stays.

    A whole refit on another machine can move keys that the data barely constrain (a ramp
    near 0, a K split far beyond every K measured) in their last digit; this adds a family
    without touching them. The held-out split is the profile's (its seed and fraction), so
    the new families' errors are those a whole refit records."""
    record = fitted.calibration
    if record is None:
        raise FitError(f"{fitted.name}: not a fitted profile (no calibration record)")
    unknown = [family for family in families if family not in FAMILIES]
    if unknown:
        raise FitError(f"unknown family {unknown[0]!r}; expected one of {', '.join(FAMILIES)}")
    missing = [family for family in families if family not in tables]
    if missing:
        raise FitError(f"no {missing[0]} table to fit")
    subset = {family: tables[family] for family in FAMILIES if family in families}
    result = fit_profile(fitted, subset, seed=record.seed,
                         holdout_fraction=record.holdout_fraction)
    new = result.gpu.calibration
    assert new is not None
    order = FAMILIES.index
    sources = sorted([s for s in record.sources if s.family not in subset] + list(new.sources),
                     key=lambda source: order(source.family))
    errors = {**{f: e for f, e in record.heldout_error.items() if f not in subset},
              **new.heldout_error}
    errors = {family: errors[family] for family in sorted(errors, key=order)}
    fitted_keys = {key for fit in result.families.values() for key in fit.values}
    merged = dataclasses.replace(
        record, sources=tuple(sources), heldout_error=errors,
        not_fitted=tuple(k for k in record.not_fitted if k not in fitted_keys))
    eff = dataclasses.replace(result.gpu.efficiency,
                              note=_extended_note(fitted.efficiency.note, record, result.families))
    gpu = dataclasses.replace(result.gpu, efficiency=eff, calibration=merged)
    return FitResult(gpu=gpu, families=result.families)


def heldout_split(num_rows: int, family: str, seed: int, fraction: float) -> np.ndarray:
    """Boolean mask of the held-out rows: a seeded random `fraction`, fixed per family."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, FAMILIES.index(family)]))
    mask = np.zeros(num_rows, dtype=bool)
    mask[rng.permutation(num_rows)[: max(1, round(num_rows * fraction))]] = True
    return mask


def absolute_percentage_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted / measured − 1| per row (0.1 = 10%)."""
    return np.abs(predicted / measured - 1.0)


def _parameters_for(family: str, decode_fitted: bool, has_sms: bool) -> tuple[Parameter, ...]:
    parameters = FAMILY_PARAMETERS[family]
    if not has_sms:  # the wave and occupancy terms stay off (0) without an SM count
        parameters = tuple(p for p in parameters if p.key not in SM_TERMS)
    if family == "prefill_attention" and not decode_fitted:
        launch = FAMILY_PARAMETERS["decode_attention"][0]
        assert launch.key == PREFILL_SHARED_LAUNCH
        return (*parameters, launch)
    return parameters


# Group sizes an all-reduce table needs before its bandwidth's scaling with the group is fitted.
_MIN_GROUP_SIZES = 3


def _told_apart(family: str, parameters: tuple[Parameter, ...], rows: pd.DataFrame,
                ) -> tuple[Parameter, ...]:
    """`parameters` less those the rows cannot tell apart from the others, which keep the
    profile's values (and are recorded as not fitted).

    The all-reduce's bus bandwidth × (2 / GPUs)^exponent and its latency per further GPU both
    move with the group's size: from two sizes (the GB200's and GB300's tables stop at a
    4-GPU tray) they trade off, and the exponent fitted there is extrapolated to every wider
    group (docs/how-to/calibrate.md, "Too few group sizes")."""
    if family == "allreduce" and rows["num_gpus"].nunique() < _MIN_GROUP_SIZES:
        return tuple(p for p in parameters if p.key != "allreduce_scaling_exponent")
    return parameters


def _fit_family(
    spec: GpuProfile,
    base: RooflineEfficiency,
    table: FamilyTable,
    parameters: tuple[Parameter, ...],
    seed: int,
    holdout_fraction: float,
) -> FamilyFit:
    rows = table.rows
    if len(rows) < 2 * len(parameters) + 2:
        raise FitError(
            f"{table.source.file}: {len(rows)} usable {table.family} rows; a fit of "
            f"{len(parameters)} parameters needs at least {2 * len(parameters) + 2}"
        )
    test = heldout_split(len(rows), table.family, seed, holdout_fraction)
    train, heldout = rows[~test], rows[test]
    # Each setting of the family's switches is a model of its own: fit each, keep the best
    # on the training rows (the first listed wins a tie).
    best: tuple[Solution, Mapping[str, float], tuple[Parameter, ...]] | None = None
    for setting in _switch_settings(table.family):
        free = tuple(p for p in parameters if p.key not in setting)
        solution = _solve(spec, with_family_values(base, table.family, setting), train,
                          table.family, free)
        if best is None or solution.cost < best[0].cost:
            best = (solution, setting, free)
    assert best is not None
    solution, chosen, free = best
    # Scored with the values the profile will store (4 significant digits).
    values = {**_coordinates_to_values(free, solution.x, digits=4), **chosen}
    fitted = with_family_values(base, table.family, values)
    predicted = PREDICTORS[table.family](heldout, spec, fitted)
    errors = absolute_percentage_errors(predicted, heldout["seconds"].to_numpy())
    return FamilyFit(
        family=table.family,
        values=values,
        heldout=HeldOutError(
            rows=len(heldout),
            median_ape=float(np.median(errors)),
            p90_ape=float(np.quantile(errors, 0.9)),
        ),
        heldout_rows=heldout.assign(predicted=predicted),
        train_rows=len(train),
    )


def _switch_settings(family: str) -> list[dict[str, float]]:
    """Every combination of the family's switches, with the keys each makes moot set to 0."""
    settings: list[dict[str, float]] = [{}]
    for switch in FAMILY_SWITCHES.get(family, ()):
        moot = dict.fromkeys(switch.moot_when_on, 0.0)
        settings = [
            {**s, switch.key: on, **(moot if on else {})} for s in settings for on in (False, True)
        ]
    return settings


def _solve(
    spec: GpuProfile,
    base: RooflineEfficiency,
    train: pd.DataFrame,
    family: str,
    parameters: tuple[Parameter, ...],
) -> Solution:
    """The multi-start robust least-squares fit of `parameters` on the training rows."""
    predictor = PREDICTORS[family]
    measured = train["seconds"].to_numpy()

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = with_family_values(base, family, _coordinates_to_values(parameters, x, digits=17))
        with np.errstate(all="ignore"):
            return np.log(predictor(train, spec, eff) / measured)

    best = None
    for x0 in _starts(parameters):
        solution = minimise(residuals, x0)
        if best is None or solution.cost < best.cost:
            best = solution
    assert best is not None
    return best


def _coordinates_to_values(
    parameters: tuple[Parameter, ...], x: np.ndarray, digits: int
) -> dict[str, float]:
    return {
        p.key: round_significant(float(to_value(p.bound, x[i])), digits)
        for i, p in enumerate(parameters)
    }


def _starts(parameters: tuple[Parameter, ...]) -> list[np.ndarray]:
    """Each parameter's listed starting points, never the spec's current values: a refit of a
    fitted profile then reproduces it exactly."""
    return [
        np.array([to_coordinate(p.bound, p.starts[index % len(p.starts)]) for p in parameters])
        for index in range(max(len(p.starts) for p in parameters))
    ]


def _efficiency_keys() -> tuple[str, ...]:
    """The profile's top-level keys (a weight dtype's own GEMM and MoE keys are all fitted or
    absent)."""
    skip = {"calibrated", "note", "gemm_by_weights", "moe_by_weights", *QUANT_KEYS, *MOE_KEYS}
    return tuple(f.name for f in dataclasses.fields(RooflineEfficiency) if f.name not in skip)


_NOTE_HEAD = "Fitted by batchsim calibrate fit; held-out absolute percentage error: "
_NOTE_TAIL = (". step_overhead_s and per_seq_overhead_s are priors (no operator table measures "
              "them).")


def _note(fits: Mapping[str, FamilyFit]) -> str:
    return _NOTE_HEAD + _note_parts(fits) + _NOTE_TAIL


def _note_parts(fits: Mapping[str, FamilyFit]) -> str:
    return ", ".join(
        f"{family} {fit.heldout.median_ape:.1%} median / {fit.heldout.p90_ape:.1%} p90"
        for family, fit in fits.items()
    )


def _extended_note(note: str, record: CalibrationRecord, fits: Mapping[str, FamilyFit]) -> str:
    """The profile's note with the new families' errors added, its own words kept (they were
    written from unrounded errors); rewritten from the records if a family is refitted or the
    note is not the fit's."""
    if (note.startswith(_NOTE_HEAD) and note.endswith(_NOTE_TAIL)
            and not set(fits) & set(record.heldout_error)):
        return note.removesuffix(_NOTE_TAIL) + ", " + _note_parts(fits) + _NOTE_TAIL
    errors = {**record.heldout_error, **{family: fit.heldout for family, fit in fits.items()}}
    parts = ", ".join(f"{family} {error.median_ape:.1%} median / {error.p90_ape:.1%} p90"
                      for family, error in sorted(errors.items(),
                                                  key=lambda item: FAMILIES.index(item[0])))
    return _NOTE_HEAD + parts + _NOTE_TAIL
