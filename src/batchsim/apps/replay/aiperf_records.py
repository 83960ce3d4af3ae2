"""One measured run from AIPerf's per-request records (`profile_export.jsonl`).

Each line is one request: `metadata` (its `request_start_ns`, `request_end_ns`, benchmark
phase) and `metrics` (`input_sequence_length`, `output_sequence_length`,
`time_to_first_token` and `request_latency` in ms, `inter_chunk_latency` — the gaps between
streamed chunks — and `inter_token_latency`, the request's mean gap). The client's pacing is
in the aggregate `profile_export_aiperf.json` beside it (`input_config.loadgen`:
`concurrency`, `request_rate`), or given with `--metadata concurrency=N`. The figures are
computed from the records as the replay computes the simulated ones (client_figures.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batchsim.apps.replay.client_figures import client_figures

_MS = 1e-3
_NS = 1e-9


def is_aiperf_record(record: Mapping[str, Any]) -> bool:
    """Whether a JSON object is one of AIPerf's per-request records."""
    return isinstance(record.get("metadata"), dict) and "metrics" in record


def aiperf_case(path: Path, records: Sequence[Mapping[str, Any]],
                metadata: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, float]] | str:
    """The run of `records` as the fields `bench_results.bench_case` reads (per-request
    lengths, pacing, deployment keys) and its figures, or why it cannot be replayed."""
    if not metadata.get("engine"):
        return ("no engine: AIPerf does not record what it measured; give it with "
                "--metadata engine=vllm|sglang|trtllm")
    profiled = [r for r in records
                if r["metadata"].get("benchmark_phase", "profiling") == "profiling"]
    failed = [r for r in profiled if r.get("error")]
    if failed:
        return (f"{len(failed)} of {len(profiled)} requests failed in the benchmark (first: "
                f"{str(failed[0]['error'])[:80]!r}): a replay would not send the same load")
    if not profiled:
        return "no records of the profiling phase"
    table = _table(profiled)
    if isinstance(table, str):
        return table
    summary = _summary(path.with_name("profile_export_aiperf.json"))
    run: dict[str, Any] = {"input_lens": table["prompt_tokens"].tolist(),
                           "output_lens": table["output_tokens"].tolist(),
                           **_pacing(summary, metadata)}
    models = summary.get("endpoint", {}).get("model_names")
    if isinstance(models, list) and models:
        run["model_id"] = models[0]
    return run, _figures(table, profiled)


def _table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame | str:
    """One row per request in send order, with the columns client_figures reads."""
    rows = []
    for index, record in enumerate(records):
        metrics, meta = record["metrics"], record["metadata"]
        values = {name: _value(metrics, name) for name in (
            "input_sequence_length", "output_sequence_length", "time_to_first_token",
            "request_latency")}
        missing = [name for name, value in values.items() if value is None]
        if missing or not isinstance(meta.get("request_start_ns"), int):
            return f"record {index + 1}: no {', '.join(missing) or 'request_start_ns'}"
        rows.append({"start": meta["request_start_ns"],
                     "prompt_tokens": int(values["input_sequence_length"]),
                     "output_tokens": int(values["output_sequence_length"]),
                     "ttft_s": values["time_to_first_token"] * _MS,
                     "e2e_s": values["request_latency"] * _MS})
    table = pd.DataFrame(rows).sort_values("start", kind="stable").reset_index(drop=True)
    table["arrival_s"] = (table["start"] - table["start"].min()) * _NS
    with np.errstate(invalid="ignore", divide="ignore"):
        table["tpot_s"] = np.where(table["output_tokens"] > 1,
                                   (table["e2e_s"] - table["ttft_s"])
                                   / (table["output_tokens"] - 1), np.nan)
    return table


def _figures(table: pd.DataFrame, records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    gaps = [gap * _MS for record in records
            for gap in (_value(record["metrics"], "inter_chunk_latency", many=True) or [])]
    itl: dict[str, object] = {}
    if gaps:
        values = np.asarray(gaps, dtype=float)
        itl = {"mean": float(values.mean()), "p50": float(np.median(values)),
               "p99": float(np.percentile(values, 99))}
    return client_figures(table, itl)


def _pacing(summary: Mapping[str, Any], metadata: Mapping[str, str]) -> dict[str, Any]:
    """`max_concurrency` and `request_rate` as a vLLM result states them."""
    loadgen = summary.get("loadgen", {})
    concurrency = loadgen.get("concurrency", metadata.get("concurrency"))
    rate = loadgen.get("request_rate", metadata.get("request_rate"))
    return {"max_concurrency": int(concurrency) if concurrency is not None else None,
            "request_rate": float(rate) if rate is not None else "inf"}


def _summary(path: Path) -> dict[str, Any]:
    """The `input_config` of the aggregate file beside the records; {} when there is none."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    config = document.get("input_config") if isinstance(document, dict) else None
    return config if isinstance(config, dict) else {}


def _value(metrics: Mapping[str, Any], name: str, many: bool = False) -> Any:
    entry = metrics.get(name)
    value = entry.get("value") if isinstance(entry, dict) else None
    if many:
        return value if isinstance(value, list) else None
    return float(value) if isinstance(value, int | float) else None
