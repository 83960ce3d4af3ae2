"""The fidelity report's end-to-end section: measured serving benchmarks replayed (markdown).

It is rendered from a small per-case table shipped with the package (`REPLAY_TABLE`), which
`batchsim calibrate report --replay FOLDER` derives from a `batchsim replay` of the
development data (apps/replay/fidelity_doc.py), so a test can check the committed section
without the benchmark data. The error of a case is simulated / measured − 1 of its mean TTFT
and mean TPOT, as `batchsim replay` reports it (negative: the simulator is too fast).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from batchsim.calibration.dev_data import DEV_DATA, DEV_DATA_PATH
from batchsim.calibration.ttft_decomposition import SIDES, decompose, render_decomposition

REPLAY_TABLE = Path(str(files("batchsim.hardware_profiles"))) / "measurements" / "replay-dev.csv"
"""The committed per-case table of the development replay."""

COUNT_COLUMNS = ("tensor_parallel", "prompt_tokens", "output_tokens", "concurrency")
TIME_COLUMNS = ("measured_ttft_s", "simulated_ttft_s", "measured_tpot_s", "simulated_tpot_s")
COLUMNS = ("case_id", "engine", "engine_version", "gpu", "model", "quantization",
           "tensor_parallel", "prompt_tokens", "output_tokens", "concurrency", *TIME_COLUMNS,
           "held_out", "engine_profile", "not_simulated")
"""The table's columns: a case's deployment (with the engine's release) and workload,
measured and simulated means (seconds; empty where it was not simulated), its side of the
split, the profile it ran with and, for a row not simulated, why."""
METRICS = ("ttft", "tpot")
GROUP = ["engine", "gpu", "family"]

# Model names of the benchmarks (the part after the organisation, lower case) by prefix ->
# family; the first match wins, so the mixture-of-experts Qwen3 models come before the dense.
_FAMILIES = (
    ("llama-3.1-", "llama-3.1"),
    ("qwen3-30b-a3b", "qwen3-moe"),
    ("qwen3-235b-a22b", "qwen3-moe"),
    ("qwen3-", "qwen3"),
    ("deepseek-v3", "deepseek-v3"),
    ("deepseek-r1", "deepseek-v3"),  # the same architecture
)


class ReplayTableError(ValueError):
    """The end-to-end table (or the replay it is derived from) cannot be used; names the file."""


def model_family(model: str) -> str:
    """The family of a benchmark's model (a Hugging Face id); the model itself if unknown."""
    name = model.rsplit("/", 1)[-1].lower()
    return next((family for prefix, family in _FAMILIES if name.startswith(prefix)), model)


def write_replay_table(table: pd.DataFrame, path: Path) -> None:
    """`table` (the `COLUMNS`) as CSV, every float at full precision so that it reads back
    exactly and a re-simulation can be compared with it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table.loc[:, list(COLUMNS)].to_csv(path, index=False, lineterminator="\n")


def read_replay_table(path: Path = REPLAY_TABLE) -> pd.DataFrame:
    """The table at `path`, typed: counts as integers, times as floats (NaN where not
    simulated), `held_out` as booleans."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as err:
        raise ReplayTableError(f"{path}: cannot read the end-to-end table ({err})") from err
    missing = [column for column in COLUMNS if column not in raw.columns]
    if missing:
        raise ReplayTableError(f"{path}: missing column(s) {', '.join(missing)}")
    table = raw.loc[:, list(COLUMNS)].copy()
    simulated = table["not_simulated"] == ""
    for column in TIME_COLUMNS:
        table[column] = _numbers(path, table, column, required=simulated)
    for column in COUNT_COLUMNS:
        table[column] = _whole(path, table, column, _numbers(path, table, column, simulated))
    flags = table["held_out"].str.lower()
    if not flags.isin(["true", "false"]).all():
        raise ReplayTableError(f"{path}: held_out must be True or False in every row")
    table["held_out"] = flags == "true"
    return table


def _numbers(path: Path, table: pd.DataFrame, column: str, required: pd.Series) -> pd.Series:
    values = pd.to_numeric(table[column].replace("", np.nan), errors="coerce")
    bad = required & ~(values > 0)
    if bad.any():
        case = table.loc[bad, "case_id"].iloc[0]
        raise ReplayTableError(f"{path}: {column} of simulated case {case!r} is not a positive "
                               "number")
    return values


def _whole(path: Path, table: pd.DataFrame, column: str, values: pd.Series) -> pd.Series:
    """`values` as integers, empty where a row was not simulated."""
    fractional = values.notna() & (values != values.round())
    if fractional.any():
        case = table.loc[fractional, "case_id"].iloc[0]
        raise ReplayTableError(f"{path}: {column} of case {case!r} is not a whole number")
    return values.astype("Int64")


def render_end_to_end(table: pd.DataFrame) -> str:
    """The section: the error per engine × GPU × model family, all and held out, its bias by
    request length, and what the cases say is still wrong."""
    cases = with_errors(table[table["not_simulated"] == ""])
    return "\n".join([
        _introduction(table),
        _error_table(table, cases),
        _length_table(cases),
        render_decomposition(cases),
        _findings(table, cases),
    ])


def with_errors(cases: pd.DataFrame) -> pd.DataFrame:
    """Simulated cases with their `family` and `ttft_error` / `tpot_error` columns."""
    cases = cases.assign(family=cases["model"].map(model_family))
    for metric in METRICS:
        cases[f"{metric}_error"] = (cases[f"simulated_{metric}_s"]
                                    / cases[f"measured_{metric}_s"] - 1.0)
    return cases


def _introduction(table: pd.DataFrame) -> str:
    profiles = sorted(set(table.loc[table["not_simulated"] == "", "engine_profile"]))
    held_out = int(table["held_out"].sum())
    return (
        "## End to end: measured serving benchmarks replayed\n\n"
        f"*Regenerate with `batchsim replay {DEV_DATA_PATH} --out results/replay-dev` "
        "followed by `batchsim calibrate report --replay results/replay-dev`, which rewrites "
        f"the per-case table `src/batchsim/hardware_profiles/measurements/{REPLAY_TABLE.name}` "
        "and renders this section from it (docs/how-to/replay.md).*\n\n"
        f"The {len(table):,} rows of the development slice of public serving benchmarks "
        f"(`{DEV_DATA}`: vLLM, SGLang and TensorRT-LLM, measured by NVIDIA and published in "
        "aiconfigurator-core), replayed by `batchsim replay` with the shipped engine profiles "
        f"({', '.join(f'`{p}`' for p in profiles)}) and its default benchmark client. The "
        "error of a case is simulated / measured − 1 of its mean TTFT and of its mean TPOT; "
        "the table gives the median and p90 of its absolute value and the bias (the median "
        "signed error: negative when the simulator is too fast) over the cases simulated, "
        "with how many of the group's rows were simulated. The engine costs were fitted to "
        "these cases by `batchsim calibrate engine`, except the rows on the held-out side of "
        f"its split ({held_out:,}: a fifth, by a hash of the case id): only the **held out** "
        "row is out of sample for those costs.\n"
    )


def _error_table(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    lines = ["| engine | GPU | model family | simulated | TTFT median / p90 | TTFT bias | "
             "TPOT median / p90 | TPOT bias |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    rows = table.assign(family=table["model"].map(model_family))
    for key, group in rows.groupby(GROUP, sort=True):
        lines.append(_table_row([str(part) for part in key], _select(cases, key), len(group)))
    lines.append(_table_row(["all", "all", "all"], cases, len(table)))
    lines.append(_table_row(["**held out**", "all", "all"], _held_out(cases),
                            int(table["held_out"].sum()), bold=True))
    return "\n".join(lines) + "\n"


def _table_row(key: list[str], cases: pd.DataFrame, rows: int, bold: bool = False) -> str:
    cells = [*key, f"{len(cases):,}/{rows:,}"]
    for metric in METRICS:
        errors = _errors(cases, metric)
        spread = f"{_share(_median_abs(errors))} / {_share(_p90_abs(errors))}"
        cells += [f"**{spread}**" if bold and errors.size else spread,
                  _signed(_bias(errors))]
    return "| " + " | ".join(cells) + " |"


def _length_table(cases: pd.DataFrame) -> str:
    """The bias of each group by prompt length (TTFT) and by output length (TPOT): where an
    error grows or changes sign with the request, a cost is missing or misplaced."""
    lines = ["TTFT bias by prompt length and TPOT bias by output length (tokens: bias, cases):",
             "",
             "| engine | GPU | model family | TTFT bias by prompt tokens | "
             "TPOT bias by output tokens |",
             "|---|---|---|---|---|"]
    for key, group in cases.groupby(GROUP, sort=True):
        cells = [*(str(part) for part in key),
                 _by_value(group, "prompt_tokens", "ttft"),
                 _by_value(group, "output_tokens", "tpot")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _by_value(cases: pd.DataFrame, column: str, metric: str) -> str:
    """The bias of `metric` at each value of `column`, as "VALUE: BIAS (CASES); ..."."""
    return "; ".join(f"{length:,}: {_bias_of(rows, metric)}"
                     for length, rows in cases.groupby(column, sort=True))


# The same figures as `batchsim replay`'s summary (apps/replay/score.py), which this layer
# cannot import: numpy's median and its default (linear) percentile.
def _median_abs(errors: np.ndarray) -> float | None:
    return float(np.median(np.abs(errors))) if errors.size else None


def _p90_abs(errors: np.ndarray) -> float | None:
    return float(np.percentile(np.abs(errors), 90)) if errors.size else None


def _bias(errors: np.ndarray) -> float | None:
    return float(np.median(errors)) if errors.size else None


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _signed(value: float | None) -> str:
    """A signed whole percent, unsigned for what rounds to zero."""
    if value is None:
        return "—"
    text = f"{value:+.0%}"
    return "0%" if text in ("+0%", "-0%") else text


def _bias_of(cases: pd.DataFrame, metric: str) -> str:
    """The bias of `metric` over `cases` with their count, as "BIAS (CASES)"."""
    return f"{_signed(_bias(_errors(cases, metric)))} ({len(cases):,})"


def _errors(cases: pd.DataFrame, metric: str) -> np.ndarray:
    return cases[f"{metric}_error"].to_numpy(dtype=float)


def _select(cases: pd.DataFrame, key: tuple[object, ...]) -> pd.DataFrame:
    mask = np.ones(len(cases), dtype=bool)
    for column, value in zip(GROUP, key, strict=True):
        mask &= (cases[column] == value).to_numpy()
    return cases[mask]


def _held_out(cases: pd.DataFrame) -> pd.DataFrame:
    return cases[cases["held_out"].to_numpy(dtype=bool)]


def _where(key: tuple[object, ...]) -> str:
    engine, gpu, family = key
    return f"{engine} {family} on the {gpu}"


# A median over fewer cases than this says little about a trend; the findings skip such
# lengths (the table above still shows them).
_MIN_CASES = 3


def _ends(cases: pd.DataFrame, column: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The cases at the shortest and at the longest length of `column` that have at least
    `_MIN_CASES` cases, or None when fewer than two lengths do."""
    counts = cases[column].value_counts()
    lengths = sorted(counts[counts >= _MIN_CASES].index)
    if len(lengths) < 2:
        return None
    return cases[cases[column] == lengths[0]], cases[cases[column] == lengths[-1]]


def _ends_text(cases: pd.DataFrame, column: str, metric: str) -> str:
    ends = _ends(cases, column)
    if ends is None:
        return ""
    short, long = ends
    unit = "prompt" if column == "prompt_tokens" else "output"
    return (f"{_bias_of(short, metric)} at {int(short[column].iloc[0]):,}-token {unit}s, "
            f"{_bias_of(long, metric)} at {int(long[column].iloc[0]):,}")


def _falls(cases: pd.DataFrame, column: str, metric: str) -> bool:
    """Whether |bias| is smaller at the longest length of `column` than at the shortest."""
    ends = _ends(cases, column)
    if ends is None:
        return False
    short, long = (abs(_bias(_errors(end, metric)) or 0.0) for end in ends)
    return long < short


def _findings(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    """What the cases say is still wrong, each finding with the figures behind it; a finding
    whose cases are absent from the table is left out."""
    bullets = [finding(table, cases) for finding in _FINDINGS]
    lines = ["What is still wrong, from these cases (bias, cases):", ""]
    lines += [bullet for bullet in bullets if bullet]
    return "\n".join(lines) + "\n"


def _vllm_prompt_length(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    # bf16 cases only: the quantised ones have their own finding.
    mine = cases[(cases["engine"] == "vllm") & (cases["quantization"] == "")]
    groups = [(key, group) for key, group in mine.groupby(GROUP, sort=True)
              if _ends(group, "prompt_tokens") is not None]
    if not groups:
        return ""
    parts = [f"{_where(key)}: {_ends_text(group, 'prompt_tokens', 'ttft')}"
             for key, group in groups]
    return ("- **vLLM TTFT against prompt length** (bf16 weights; " + "; ".join(parts) + ")." +
            _vllm_first_token(mine))


def _vllm_first_token(cases: pd.DataFrame) -> str:
    """What the decomposition says of the vLLM cases, at the shortest and longest prompts."""
    parts = decompose(cases)
    lengths = sorted(set(parts["prompt_tokens"]))
    if len(lengths) < 2:
        return ""
    ends = [parts[parts["prompt_tokens"] == length] for length in (lengths[0], lengths[-1])]
    per_step = lengths[-1] / ends[1]["measured_excess_steps"].median()
    return (" Decomposed (the table above; ranges are the middle 80% of the cases): " +
            "; ".join(_first_token_text(end) for end in ends) + ". A prompt's first token "
            f"thus comes about one decode step per {per_step:.0f} prompt tokens later than "
            "its own compute accounts for, at every tensor-parallel size, as if the prompt "
            "were computed in small chunks beside the decodes. vLLM 0.12.0's defaults split no "
            "prompt that fits its 8,192-token budget (`long_prefill_token_threshold` is set "
            "only with `max_num_partial_prefills` > 1, vllm/config/scheduler.py); the replay "
            "runs the publisher's launch budget of batch size + prompt + 1,500 tokens, which "
            "fits one or two such prompts a step (docs/background/engines.md, \"The tables' "
            "launch\"), and its closed loop still keeps part of each wave together.")


def _first_token_text(rows: pd.DataFrame) -> str:
    stall = [rows[f"{side}_stall_s"].median() for side in SIDES]
    steps = [rows[f"{side}_excess_steps"].quantile([0.1, 0.9]).to_numpy() for side in SIDES]
    return (f"{int(rows['prompt_tokens'].iloc[0]):,}-token prompts stall the others "
            f"{stall[0]:.3f} s measured, {stall[1]:.3f} s simulated, and their TTFT holds "
            f"{steps[0][0]:.0f}-{steps[0][1]:.0f} decode steps beyond that measured, "
            f"{steps[1][0]:.0f}-{steps[1][1]:.0f} simulated")


def _crosses(cases: pd.DataFrame) -> bool:
    """Whether TTFT comes out too slow at the shortest prompts and too fast at the longest."""
    ends = _ends(cases, "prompt_tokens")
    if ends is None:
        return False
    short, long = (_bias(_errors(end, "ttft")) or 0.0 for end in ends)
    return short > 0 > long


def _trtllm_ttft(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    mine = cases[cases["engine"] == "trtllm"]
    if mine.empty:
        return ""
    held, fitted = _held_out(mine), mine[~mine["held_out"].to_numpy(dtype=bool)]
    by_concurrency = [_bias(_errors(group, "ttft")) or 0.0
                      for _, group in mine.groupby("concurrency")]
    # Said only where the numbers say it: the bias has both signs across concurrencies.
    turns = min(by_concurrency) < 0 < max(by_concurrency)
    title = ", and its bias changes sign with concurrency" if turns else ""
    why = (" No front-end latency or per-step cost can follow an error that rises and falls "
           "with concurrency, and the API server's streaming ceiling binds only at the highest "
           "output-token rates; how a wave of prompts is split into steps can.") if turns else ""
    return (f"- **TensorRT-LLM TTFT: {_bias_of(fitted, 'ttft')} on the cases its costs were "
            f"fitted to, {_bias_of(held, 'ttft')} held out{title}** (by concurrent requests: "
            f"{_by_value(mine, 'concurrency', 'ttft')})." + why + " Its unchunked in-flight "
            "batching is modelled with batchsim's `continuous` policy under the tables' launch "
            "budget (batch size + prompt + 1,500 tokens: one or two prompts a step; "
            "docs/background/engines.md), so which waiting prompts share a context step is "
            "batchsim's first-come rule, which the engine's may not be.")


def _sglang_deployments(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    mine = cases[cases["engine"] == "sglang"]
    groups = list(mine.groupby(GROUP, sort=True))
    if len(groups) < 2:
        return ""
    parts = [f"{_where(key)}{_weights(group)}: TTFT median error "
             f"{_share(_median_abs(_errors(group, 'ttft')))}, bias {_bias_of(group, 'ttft')}, "
             f"TPOT "
             f"{_bias_of(group, 'tpot')}" for key, group in groups]
    # The worst deployment by its TTFT error, which a bias near 0 can hide.
    worst_key, worst = max(groups,
                           key=lambda item: _median_abs(_errors(item[1], "ttft")) or 0.0)
    trend = _ends_text(worst, "prompt_tokens", "ttft")
    trend = f" On {_where(worst_key)} the TTFT bias is {trend}." if trend else ""
    ttft, tpot = (abs(_bias(_errors(worst, metric)) or 0.0) for metric in METRICS)
    # Said only where the numbers say it: a TPOT bias well under the TTFT one.
    decode = (f" The TPOT bias of {_where(worst_key)} is far smaller, so its decode steps are "
              "priced about right and the error is in the prefills and how they queue."
              ) if tpot < ttft / 2 else ""
    block = (" Block-scaled fp8 GEMMs are priced with the per-tensor fp8 fit (\"What the "
             "operator fit covers\", above).") if "fp8_block" in set(worst["quantization"]) \
        else ""
    return ("- **SGLang TTFT differs by deployment** (" + "; ".join(parts) + ")." + trend +
            decode + " One SGLang profile is fitted over all of its groups, which ran different "
            "SGLang releases (the data's `backend_version`): one profile per engine cannot "
            "hold two releases' front ends and defaults (docs/background/engines.md). Rows of "
            "0.5.6 on run with the tables' launch (mixed chunks, a budget of the prompt + 1,500 "
            "tokens), the earlier ones with SGLang's defaults, and the profile's costs are "
            "fitted over both." + block)


def _quantized_tpot(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    quantized = cases[cases["quantization"] != ""]
    if quantized.empty:
        return ""
    keys = [*GROUP, "quantization"]
    groups = list(quantized.groupby(keys, sort=True))
    parts = [f"{_where(key[:3])}, {key[3]}: {_bias_of(group, 'tpot')}" for key, group in groups]
    bf16 = [f"{engine} {_bias_of(group, 'tpot')}"
            for engine, group in cases[cases["quantization"] == ""].groupby("engine", sort=True)
            if engine in set(quantized["engine"])]
    worst_key, worst = max(groups, key=lambda item: abs(_bias(_errors(item[1], "tpot")) or 0))
    trend = _ends_text(worst, "output_tokens", "tpot")
    trend = f" On {_where(worst_key[:3])} the TPOT bias is {trend}." if trend else ""
    # Said only where the numbers say it: the error falls as outputs lengthen.
    mixed = (" An error that falls as outputs lengthen points at the steps that carry a "
             "prefill chunk beside the decodes (the shorter the output, the larger the share "
             "of a request's steps that do).") if _falls(worst, "output_tokens", "tpot") else ""
    return ("- **TPOT with fp8 weights** (" + "; ".join(parts) + "; with bf16 weights: " +
            "; ".join(bf16) + ")." + trend + mixed + " fp8 GEMMs are priced with their own "
            "fit to fp8 operator tables (block-scaled ones with the per-tensor fit), and the KV "
            "cache is taken as bf16 (the tables do not say how it was stored)." + (
                " What the vLLM fp8 rows imply about their prefills is in docs/how-to/replay.md "
                "(\"Where we stand\")." if "vllm" in set(quantized["engine"]) else ""))


def _weights(cases: pd.DataFrame) -> str:
    formats = sorted({q or "bf16" for q in cases["quantization"]})
    return f" ({', '.join(formats)})"


def _not_simulated(table: pd.DataFrame, cases: pd.DataFrame) -> str:
    skipped = table[table["not_simulated"] != ""]
    if skipped.empty:
        return ""
    parts = [f"{len(rows):,} {engine} rows of {model} on the {gpu}: {reason}"
             for (engine, gpu, model, reason), rows in skipped.groupby(
                 ["engine", "gpu", "model", "not_simulated"], sort=True)]
    return "- **Not simulated:** " + "; ".join(parts) + "."


_FINDINGS: tuple[Callable[[pd.DataFrame, pd.DataFrame], str], ...] = (
    _vllm_prompt_length, _trtllm_ttft, _sglang_deployments, _quantized_tpot, _not_simulated)
