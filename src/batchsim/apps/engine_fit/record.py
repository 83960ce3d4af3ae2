"""The fitted engine profile: the base profile with its costs and a record of the fit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from batchsim.apps.engine_fit.fit import EngineFit, profile_yaml, with_costs
from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.measured import Unreplayed
from batchsim.apps.replay.score import error_figures, percent
from batchsim.apps.replay.simulate import ReplayedCase
from batchsim.apps.replay.split import SPLIT_RULE
from batchsim.experiment.engine_profile import EngineProfile

METHOD = ("batchsim calibrate engine: every case simulated as batchsim replay does; the costs "
          "minimise the log errors of mean TTFT and mean TPOT on the fitted cases, squared up "
          "to log(1.25) and growing linearly past it (scipy's soft_l1 loss) "
          "(Gauss-Newton on simulations: sensitivities by finite differences, scipy "
          "least_squares with costs >= 0 and a compute scale >= 0.1, each step simulated and "
          "halved until the error falls, the sensitivities measured again over moves three "
          "times wider when no halving does)")
WRITTEN_BY = "# Costs and calibration written by `batchsim calibrate engine`."


def error_record(replayed: Sequence[ReplayedCase]) -> dict[str, object]:
    """Cases, and per metric the median and p90 of |simulated / measured - 1| and the bias."""
    record: dict[str, object] = {"cases": len(replayed)}
    for metric in ("ttft", "tpot"):
        errors = np.array([getattr(r, f"{metric}_s") / getattr(r.case, f"{metric}_s") - 1.0
                           for r in replayed])
        figures = error_figures(metric, errors)
        record[metric] = {name: None if value is None else round(value, 4) for name, value in (
            ("median_abs_error", figures[f"{metric}_median_abs"]),
            ("p90_abs_error", figures[f"{metric}_p90_abs"]),
            ("bias", figures[f"{metric}_median_signed"]))}
    return record


def fitted_profile(base: EngineProfile, fit: EngineFit, data: Sequence[Path], backend: str,
                   client: BenchmarkClient, unread: Sequence[Unreplayed] = ()) -> EngineProfile:
    """`base` with the fitted costs and the record: every row of the backend is fitted on,
    held out, or counted under `not_simulated` with its reason."""
    profile = with_costs(base, fit.costs)
    reasons = Counter(u.reason for u in [*unread, *fit.unreplayed])
    calibration = {
        "method": METHOD,
        "data": [path.name for path in data],
        "backend": backend,
        "client": asdict(client),
        "split": SPLIT_RULE,
        "iterations": fit.iterations,
        "fitted_costs": list(fit.fitted_costs),
        "fitted_on": error_record(fit.fitted),
        "held_out": error_record(fit.held_out),
        "not_simulated": [{"rows": n, "reason": reason} for reason, n in reasons.most_common()],
    }
    spec = profile.spec.model_copy(update={"calibration": calibration})
    return EngineProfile(spec, base.where, base.ref)


def write_profile(profile: EngineProfile, base_text: str, out: Path) -> None:
    """The profile as YAML, under the base file's leading comments (what it is, its sources)."""
    header = []
    for line in base_text.splitlines():
        if not line.startswith("#"):
            break
        if line != WRITTEN_BY:
            header.append(line)
    header.append(WRITTEN_BY)
    body = profile_yaml(profile.spec.model_dump(mode="json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(header) + "\n" + body, encoding="utf-8")


def fidelity_table(profiles: Sequence[EngineProfile]) -> str:
    """The markdown table of each profile's fitted costs and its error on both sides of the
    split, from the profiles' own records (docs/background/engines.md shows it)."""
    lines = ["| engine | fitted / held-out cases | front end: latency, serial, stream "
             "| step, per sequence | compute scale "
             "| held-out TTFT median / p90 / bias | held-out TPOT median / p90 / bias "
             "| fitted-on TTFT median | fitted-on TPOT median |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for profile in profiles:
        record, costs = profile.spec.calibration or {}, profile.spec.costs
        fitted, held = record.get("fitted_on"), record.get("held_out")
        if not isinstance(fitted, dict) or not isinstance(held, dict):
            lines.append(f"| {profile.name} | not calibrated | | | | | | | |")
            continue
        lines.append(
            f"| {profile.name} | {fitted['cases']} / {held['cases']} "
            f"| {_ms(costs.frontend_latency_s)}, {_ms(costs.frontend_serial_s)}, "
            f"{_us(costs.frontend_stream_s)} "
            f"| {_ms(costs.step_overhead_s)}, {_us(costs.per_seq_overhead_s)} "
            f"| {costs.compute_scale:.3g} "
            f"| {_triple(held['ttft'])} | {_triple(held['tpot'])} "
            f"| {percent(fitted['ttft']['median_abs_error'])} "
            f"| {percent(fitted['tpot']['median_abs_error'])} |")
    return "\n".join(lines) + "\n"


def _triple(figures: dict[str, float]) -> str:
    return " / ".join(percent(figures[k]) for k in ("median_abs_error", "p90_abs_error", "bias"))


def _ms(value: float | None) -> str:
    return "prior" if value is None else f"{value * 1e3:.2f} ms"


def _us(value: float | None) -> str:
    return "prior" if value is None else f"{value * 1e6:.1f} µs"
