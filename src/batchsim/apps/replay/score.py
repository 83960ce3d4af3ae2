"""How wrong the simulation is: per case, and per engine × GPU × model.

The error of a prediction p of a measurement m is p / m − 1: negative when the simulator is
too fast. Aggregates give the median and p90 of its absolute value and the median signed one
(the bias), over the cases simulated; the share of rows simulated is reported beside them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import pandas as pd

from batchsim.apps.replay.client_figures import FIGURES
from batchsim.apps.replay.measured import Unreplayed
from batchsim.apps.replay.simulate import ReplayedCase
from batchsim.apps.replay.split import is_held_out

GROUP = ["engine", "gpu", "model"]
METRICS = ("ttft", "tpot")  # their means, in every replay (columns measured_ttft_s, ...)
EXTRA_FIGURES = tuple(f for f in FIGURES if f not in ("ttft_mean", "tpot_mean"))
"""Figures only some inputs report (per-request files): percentiles, ITL, E2E, throughput."""


def case_table(replayed: Sequence[ReplayedCase]) -> pd.DataFrame:
    """One row per simulated case: its deployment, measured and simulated means, errors; and
    each further figure that any case's input reports (NaN where a case's does not)."""
    rows = []
    for r in replayed:
        c = r.case
        rows.append({
            "case_id": c.case_id, "source": c.source, "engine": c.engine,
            "engine_version": c.engine_version, "gpu": c.gpu,
            "model": c.model, "quantization": c.quantization, "tensor_parallel": c.tensor_parallel,
            "pipeline_parallel": c.pipeline_parallel, "prompt_tokens": c.prompt_tokens,
            "output_tokens": c.output_tokens, "concurrency": c.concurrency,
            "measured_ttft_s": c.ttft_s, "simulated_ttft_s": r.ttft_s, "measured_tpot_s": c.tpot_s,
            "simulated_tpot_s": r.tpot_s, "preemptions": r.preemptions,
            "engine_profile": r.engine_profile, "held_out": is_held_out(c.case_id),
        })
    table = pd.DataFrame(rows, columns=_CASE_COLUMNS)
    for metric in METRICS:
        table[f"{metric}_error"] = (table[f"simulated_{metric}_s"]
                                    / table[f"measured_{metric}_s"] - 1.0)
    for figure in reported_figures(replayed):
        measured = [r.case.measured.get(figure, np.nan) for r in replayed]
        simulated = [r.simulated.get(figure, np.nan) for r in replayed]
        table[f"measured_{figure}"] = np.array(measured, dtype=float)
        table[f"simulated_{figure}"] = np.array(simulated, dtype=float)
        table[f"{figure}_error"] = table[f"simulated_{figure}"] / table[f"measured_{figure}"] - 1
    return table


def reported_figures(replayed: Sequence[ReplayedCase]) -> list[str]:
    """The further figures (EXTRA_FIGURES) that at least one case's input reports."""
    return [f for f in EXTRA_FIGURES if any(f in r.case.measured for r in replayed)]


_CASE_COLUMNS = ["case_id", "source", "engine", "engine_version", "gpu", "model", "quantization",
                 "tensor_parallel", "pipeline_parallel", "prompt_tokens", "output_tokens",
                 "concurrency",
                 "measured_ttft_s", "simulated_ttft_s", "measured_tpot_s", "simulated_tpot_s",
                 "preemptions", "engine_profile", "held_out"]


def error_summary(cases: pd.DataFrame, skipped: Sequence[Unreplayed]) -> pd.DataFrame:
    """Per engine × GPU × model, then all together: rows, simulated, and the error figures."""
    skipped_rows = pd.DataFrame([{"engine": s.engine, "gpu": s.gpu, "model": s.model}
                                 for s in skipped], columns=GROUP)
    groups = pd.concat([cases[GROUP], skipped_rows]).drop_duplicates()
    rows = [_summary_row(cases, skipped_rows, dict(zip(GROUP, key, strict=True)))
            for key in sorted(groups.itertuples(index=False, name=None))]
    rows.append(_summary_row(cases, skipped_rows, {"engine": "all", "gpu": "all",
                                                   "model": "all"}))
    # The cases `batchsim calibrate engine` never fits on (replay/split.py): the error of a
    # calibrated profile is only out of sample there.
    held_out = cases[cases["held_out"].to_numpy(dtype=bool)]
    skipped_held = skipped_rows[[is_held_out(s.case_id) for s in skipped]]
    rows.append(_summary_row(held_out, skipped_held, {"engine": "held out", "gpu": "all",
                                                      "model": "all"}))
    return pd.DataFrame(rows)


def _summary_row(cases: pd.DataFrame, skipped: pd.DataFrame,
                 key: dict[str, str]) -> dict[str, object]:
    mine = _select(cases, key)
    row: dict[str, object] = {**key, "rows": len(mine) + len(_select(skipped, key)),
                              "simulated": len(mine)}
    for metric in METRICS:
        errors = mine[f"{metric}_error"].to_numpy(dtype=float)
        row.update(error_figures(metric, errors))
    return row


def _select(table: pd.DataFrame, key: dict[str, str]) -> pd.DataFrame:
    if key["engine"] in ("all", "held out"):
        return table
    mask = np.ones(len(table), dtype=bool)
    for column, value in key.items():
        mask &= (table[column] == value).to_numpy()
    return table[mask]


def figure_summary(cases: pd.DataFrame) -> pd.DataFrame:
    """Per further figure in `cases` (columns `<figure>_error`): cases and error figures."""
    rows = []
    for figure in EXTRA_FIGURES:
        if f"{figure}_error" not in cases:
            continue
        errors = cases[f"{figure}_error"].to_numpy(dtype=float)
        errors = errors[~np.isnan(errors)]
        rows.append({"figure": figure, "cases": int(errors.size),
                     **{key.removeprefix("x_"): value
                        for key, value in error_figures("x", errors).items()}})
    return pd.DataFrame(rows, columns=["figure", "cases", "median_abs", "p90_abs",
                                       "median_signed", "too_fast"])


def error_figures(metric: str, errors: np.ndarray) -> dict[str, float | None]:
    """Median and p90 of |error|, the median signed error (bias), the share too fast."""
    if errors.size == 0:
        return {f"{metric}_median_abs": None, f"{metric}_p90_abs": None,
                f"{metric}_median_signed": None, f"{metric}_too_fast": None}
    absolute = np.abs(errors)
    return {f"{metric}_median_abs": float(np.median(absolute)),
            f"{metric}_p90_abs": float(np.percentile(absolute, 90)),
            f"{metric}_median_signed": float(np.median(errors)),
            f"{metric}_too_fast": float(np.mean(errors < 0))}


SUMMARY_HEADERS = ("engine", "GPU", "model", "simulated", "TTFT median |err|", "TTFT p90 |err|",
                   "TTFT bias", "TPOT median |err|", "TPOT p90 |err|", "TPOT bias")
_FIGURES = ("median_abs", "p90_abs", "median_signed")


def summary_cells(row: Mapping[Hashable, object]) -> list[str]:
    """One summary row as the text both the console table and the report show, in the order
    of `SUMMARY_HEADERS`."""
    cells = [str(row[key]) for key in GROUP] + [f"{row['simulated']}/{row['rows']}"]
    return cells + [percent(row[f"{metric}_{figure}"]) for metric in METRICS
                    for figure in _FIGURES]


def percent(value: object) -> str:
    """An error as the tables show it: a whole percent, signed when negative; — when absent."""
    if not isinstance(value, float) or value != value:
        return "—"
    return f"{value:+.0%}" if value < 0 else f"{value:.0%}"
