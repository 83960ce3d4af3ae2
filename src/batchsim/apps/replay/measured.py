"""Measured benchmark cases from a tidy CSV of aggregate rows (one benchmark a row).

The columns are those of the public end-to-end tables (aiconfigurator-core's silicon
samples): the deployment (`backend`, `model_path`, `system`, `precision`, `gemm_quant_mode`,
`mode`, `tp_size`, `pp_size`, and where given `attention_dp_size`, `moe_tp_size`,
`moe_ep_size`, ...), the workload (`isl`, `osl`, `batch_size` = concurrent
requests of a closed loop) and the client-measured means `silicon_ttft_ms`, `silicon_tpot_ms`.
A row that cannot be read is kept with the reason, never dropped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from batchsim.apps.replay.tables_launch import tables_launch

REQUIRED = ("id", "backend", "model_path", "system", "mode", "isl", "osl", "batch_size",
            "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")


class ReplayError(ValueError):
    """A file that cannot be replayed at all (unreadable, or a required column missing)."""


@dataclass(frozen=True, slots=True)
class MeasuredCase:
    """One measured benchmark: a closed loop of `concurrency` users with fixed lengths (an
    aggregate row), or the very requests a benchmark client sent (`request_lengths`, in send
    order), in a closed loop or, with a `request_rate`, an open one."""

    case_id: str
    source: str  # file:line
    engine: str
    model: str  # as the benchmark names it (a Hugging Face id)
    gpu: str
    quantization: str  # "" for bf16, else the GEMM quantisation (fp8, fp8_block, ...)
    tensor_parallel: int
    pipeline_parallel: int
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    ttft_s: float  # mean
    tpot_s: float  # mean
    # (prompt, output) tokens of each request in send order; empty: every request has
    # `prompt_tokens` and `output_tokens` and the replay's client decides how many are sent.
    request_lengths: tuple[tuple[int, int], ...] = ()
    # Every figure the benchmark reported, by client_figures.FIGURES name (seconds, per s).
    measured: Mapping[str, float] = field(default_factory=dict)
    # Requests per second of an open loop (gamma gaps of this `burstiness`, the shape
    # parameter); None: a closed loop of `concurrency` users.
    request_rate: float | None = None
    burstiness: float = 1.0
    # The rest of the layout, in the tables' terms (deployment.replay_layout maps them):
    # attention data-parallel ranks of `tensor_parallel` GPUs each, the GPUs the experts are
    # spread over, and those each expert is split over (None: not given).
    attention_data_parallel: int = 1
    moe_expert_parallel: int = 1
    moe_tensor_parallel: int | None = None
    # The engine's release, as the benchmark gives it ("" when it does not).
    engine_version: str = ""
    # What the benchmark launched the engine with (None: the engine profile's value): its max
    # batch, its step token budget, and whether prefill chunks carry the decodes.
    engine_max_batch: int | None = None
    engine_token_budget: int | None = None
    engine_mixed_prefill: bool | None = None
    # A mixture-of-experts model's routed-expert quantisation (the tables' `moe_quant_mode`;
    # "" when not given: the GEMMs' own). The tables fill it for dense models too.
    expert_quantization: str = ""


@dataclass(frozen=True, slots=True)
class Unreplayed:
    """A row that was not simulated, and why."""

    case_id: str
    source: str
    engine: str
    model: str
    gpu: str
    reason: str


def read_cases(path: Path) -> tuple[list[MeasuredCase], list[Unreplayed]]:
    """Every row of `path`: a case, or the reason it is not one."""
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as err:
        raise ReplayError(f"{path}: cannot read the CSV ({err})") from err
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise ReplayError(f"{path}: missing column(s) {', '.join(missing)} "
                          f"(expected at least: {', '.join(REQUIRED)})")
    cases: list[MeasuredCase] = []
    skipped: list[Unreplayed] = []
    for line, record in zip(range(2, len(table) + 2), table.to_dict("records"), strict=True):
        row = {str(key): str(value) for key, value in record.items()}
        source = f"{path.name}:{line}"
        case = _case(row, source)
        if isinstance(case, str):
            skipped.append(Unreplayed(row["id"], source, row["backend"], row["model_path"],
                                      row["system"], case))
        else:
            cases.append(case)
    return cases, skipped


_COUNTS = ("isl", "osl", "batch_size", "tp_size", "pp_size")
_MEANS = ("silicon_ttft_ms", "silicon_tpot_ms")
_DEFAULTS = {"pp_size": "1"}  # an empty pp_size means no pipeline parallelism
# Optional layout columns; empty or 0 (as the tables write for a degree not used): not given.
_LAYOUT = ("attention_dp_size", "moe_tp_size", "moe_ep_size")


def _case(row: dict[str, str], source: str) -> MeasuredCase | str:
    """The case of one row, or why the row is not one."""
    if row["mode"] == "disagg":
        workers = [key for key in ("prefill_num_workers", "decode_num_workers") if row.get(key)]
        given = "" if workers else " (and the row gives no prefill/decode worker counts)"
        return f"mode 'disagg': disaggregated rows are not replayed yet{given}"
    if row["mode"] != "agg":
        return f"mode {row['mode']!r}: expected 'agg' (colocated) or 'disagg'"
    values: dict[str, float] = {}
    for key in (*_COUNTS, *_MEANS):
        text = row.get(key, "") or _DEFAULTS.get(key, "")
        value = _positive(text)
        if value is None:
            return f"{key}: expected a positive number, got {text!r}"
        values[key] = value
    layout: dict[str, int | None] = {}
    for key in _LAYOUT:
        text = row.get(key, "")
        if text.strip() in ("", "0"):
            layout[key] = None
            continue
        value = _positive(text)
        if value is None:
            return f"{key}: expected a positive number or nothing, got {text!r}"
        values[key] = value
        layout[key] = int(value)
    fractional = [key for key in (*_COUNTS, *_LAYOUT)
                  if key in values and values[key] != int(values[key])]
    if fractional:
        return f"{', '.join(fractional)}: expected a whole number"
    # The tables' `batch_size` is the users of the closed loop and the max batch the engine
    # was launched with.
    version = row.get("backend_version", "").strip()
    launch = tables_launch(row["backend"], version, int(values["batch_size"]), int(values["isl"]),
                           layout["attention_dp_size"] or 1)
    return MeasuredCase(
        case_id=row["id"], source=source, engine=row["backend"], model=row["model_path"],
        gpu=row["system"], quantization=row.get("gemm_quant_mode", ""),
        tensor_parallel=int(values["tp_size"]), pipeline_parallel=int(values["pp_size"]),
        prompt_tokens=int(values["isl"]), output_tokens=int(values["osl"]),
        concurrency=int(values["batch_size"]),
        ttft_s=values["silicon_ttft_ms"] / 1000.0, tpot_s=values["silicon_tpot_ms"] / 1000.0,
        measured={"ttft_mean": values["silicon_ttft_ms"] / 1000.0,
                  "tpot_mean": values["silicon_tpot_ms"] / 1000.0},
        attention_data_parallel=layout["attention_dp_size"] or 1,
        moe_expert_parallel=layout["moe_ep_size"] or 1,
        moe_tensor_parallel=layout["moe_tp_size"],
        engine_version=version,
        engine_max_batch=launch.max_batch, engine_token_budget=launch.token_budget,
        engine_mixed_prefill=launch.mixed_prefill,
        expert_quantization=row.get("moe_quant_mode", "").strip(),
    )


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None
