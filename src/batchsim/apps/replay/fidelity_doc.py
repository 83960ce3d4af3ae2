"""The end-to-end table of docs/fidelity.md, derived from a `batchsim replay` output folder.

The table (calibration/end_to_end_report.py renders it) keeps one row per benchmark row of the
development data: the simulated ones from `replay.parquet`, the others from `replay.json`'s
"not simulated" list with their reason, so the section can say how many of each group's rows
were simulated. Only a replay of the development slice with the shipped engine profiles and
the default benchmark client is accepted: the section claims exactly that, and its test
re-simulates rows with those defaults.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.split import is_held_out
from batchsim.calibration.end_to_end_report import COLUMNS, DEV_DATA, ReplayTableError


def replay_table(folder: Path) -> pd.DataFrame:
    """The table's rows from `folder` (a `batchsim replay` output folder, or its
    replay.parquet), checked to be a replay of the development data as shipped."""
    if folder.name == "replay.parquet":
        folder = folder.parent
    settings = _settings(folder / "replay.json")
    simulated = _simulated(folder / "replay.parquet")
    skipped = pd.DataFrame([_skipped_row(entry) for entry in settings["not_simulated"]],
                           columns=list(COLUMNS))
    table = pd.concat([simulated, skipped], ignore_index=True) if len(skipped) else simulated
    return table.sort_values("case_id", kind="stable", ignore_index=True)


def _settings(path: Path) -> dict[str, Any]:
    """replay.json, refused unless it replayed the development data alone, with the shipped
    profiles and the default client."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ReplayTableError(f"{path}: cannot read the replay's settings ({err})") from err
    if settings.get("inputs") != [DEV_DATA]:
        # The rest of the public tables is reserved for validating the project.
        raise ReplayTableError(f"{path}: replayed {settings.get('inputs')}; the end-to-end "
                               f"table is derived from the development data alone ({DEV_DATA})")
    if settings.get("engine_profiles"):
        raise ReplayTableError(f"{path}: ran with --engine {settings['engine_profiles']}; the "
                               "end-to-end table replays the shipped engine profiles")
    default = asdict(BenchmarkClient())
    client = {key: settings.get(key) for key in default}
    if client != default:
        raise ReplayTableError(f"{path}: ran with benchmark client {client}; the end-to-end "
                               f"table uses the default one {default}")
    return settings


def _simulated(path: Path) -> pd.DataFrame:
    try:
        cases = pd.read_parquet(path)
    except (OSError, ValueError) as err:
        raise ReplayTableError(f"{path}: cannot read the replayed cases ({err})") from err
    wanted = [column for column in COLUMNS if column != "not_simulated"]
    missing = [column for column in wanted if column not in cases.columns]
    if missing:
        raise ReplayTableError(f"{path}: missing column(s) {', '.join(missing)}")
    return cases.loc[:, wanted].assign(not_simulated="")


def _skipped_row(entry: dict[str, str]) -> dict[str, object]:
    """A row that was not simulated: who it is, its side of the split and why; the rest
    stays empty."""
    row: dict[str, object] = dict.fromkeys(COLUMNS, "")
    row.update({key: entry[key] for key in ("case_id", "engine", "gpu", "model")})
    row["held_out"] = is_held_out(entry["case_id"])
    row["not_simulated"] = entry["reason"]
    return row
