"""Measured runs from benchmark clients' result files, one run per JSON object (or, for
AIPerf's per-request records, one run per file: aiperf_records.py).

Two clients write nearly the same shape (docs/how-to/replay.md lists the fields read):
`vllm bench serve --save-result --save-detailed` (one object; `--append-result` adds one per
line; latency keys `mean_ttft_ms`, …, `p99_e2el_ms`) and SGLang's `bench_serving
--output-file --output-details` (JSON lines; `…_e2e_latency_ms`). Per-request `input_lens`
and `output_lens` give the workload in send order; `max_concurrency` and `request_rate` the
client's pacing. Neither says what it ran on: the deployment comes from keys the user added
(`vllm bench serve --metadata gpu=h100_sxm tensor_parallel=2`) or from `batchsim replay
--metadata`, which fills in what a file does not say. A run that cannot be replayed is kept
with the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from batchsim.apps.replay.aiperf_records import aiperf_case, is_aiperf_record
from batchsim.apps.replay.client_figures import STATISTICS, THROUGHPUTS
from batchsim.apps.replay.measured import MeasuredCase, ReplayError, Unreplayed

# The latency names of each client's keys (mean_<name>_ms and the like).
_LATENCY_KEYS = {"vllm": {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"},
                 "sglang": {"ttft": "ttft", "tpot": "tpot", "itl": "itl",
                            "e2e": "e2e_latency"}}
_STATISTIC_KEYS = {"mean": "mean", "p50": "median", "p99": "p99"}
# Deployment keys a file (or --metadata) may give, and the other names they go by.
DEPLOYMENT_KEYS = {"gpu": ("gpu", "system"), "tensor_parallel": ("tensor_parallel", "tp"),
                   "pipeline_parallel": ("pipeline_parallel", "pp"),
                   "quantization": ("quantization",), "engine": ("engine",),
                   "model": ("model", "model_id"), "concurrency": ("concurrency",),
                   "request_rate": ("request_rate",)}


def read_bench_results(path: Path, metadata: Mapping[str, str] | None = None,
                       ) -> tuple[list[MeasuredCase], list[Unreplayed]]:
    """Every run in `path` (a JSON object, or one per line): a case, or why it is not one."""
    given = metadata or {}
    cases: list[MeasuredCase] = []
    skipped: list[Unreplayed] = []
    for line, run in _runs(path, given):
        source = f"{path.name}:{line}"
        case = run if isinstance(run, str) else bench_case(run[0], source, given, run[1])
        if isinstance(case, str):
            record = {} if isinstance(run, str) else run[0]
            # A run with nothing read says only what --metadata gave.
            engine = _deployment(record, given, "engine") if record else given.get("engine", "")
            skipped.append(Unreplayed(f"{path.stem}:{line}", source, str(engine),
                                      str(_deployment(record, given, "model")),
                                      str(_deployment(record, given, "gpu")), case))
        else:
            cases.append(case)
    return cases, skipped


_Run = tuple[dict[str, Any], dict[str, float] | None]


def _runs(path: Path, metadata: Mapping[str, str]) -> Iterator[tuple[int, _Run | str]]:
    """(line, run) of each run: its object and its figures when computed from per-request
    records, or why it cannot be read. AIPerf's records make one run of the whole file, a
    client's results one per object."""
    records = list(_records(path))
    if not (records and is_aiperf_record(records[0][1])):
        yield from ((line, (record, None)) for line, record in records)
        return
    yield 1, aiperf_case(path, [record for _, record in records], metadata)


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of each run: the whole file as one JSON object, else one per line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ReplayError(f"{path}: cannot read the file ({err})") from err
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    for line, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        try:
            record = json.loads(row)
        except json.JSONDecodeError as err:
            raise ReplayError(f"{path}:{line}: not a JSON object ({err.msg})") from None
        if not isinstance(record, dict):
            raise ReplayError(f"{path}:{line}: expected a JSON object (one benchmark run), "
                              f"got {type(record).__name__}")
        yield line, record


def client_of(record: Mapping[str, Any]) -> str:
    """Which client wrote `record`: its E2E latency key tells (vLLM: e2el)."""
    return "sglang" if any("e2e_latency" in key for key in record) else "vllm"


def _deployment(record: Mapping[str, Any], metadata: Mapping[str, str], key: str) -> object:
    for name in DEPLOYMENT_KEYS[key]:
        if record.get(name) not in (None, ""):
            return record[name]
    for name in DEPLOYMENT_KEYS[key]:
        if metadata.get(name):
            return metadata[name]
    if key == "engine":  # each client is the benchmark of its own engine
        return client_of(record)
    return {"tensor_parallel": 1, "pipeline_parallel": 1, "quantization": ""}.get(key, "")


def bench_case(record: Mapping[str, Any], source: str, metadata: Mapping[str, str],
               figures: Mapping[str, float] | None = None) -> MeasuredCase | str:
    """The case of one run, or why it is not one; `figures` when computed from per-request
    records rather than read from the run's keys."""
    lengths = _request_lengths(record)
    if isinstance(lengths, str):
        return lengths
    pacing = _pacing(record, len(lengths))
    if isinstance(pacing, str):
        return pacing
    rate, burstiness, concurrency = pacing
    measured = dict(figures) if figures is not None else _figures(record)
    for mean in ("ttft_mean", "tpot_mean"):
        if mean not in measured:
            return f"no {mean.replace('_', ' ')} in the file (expected {_mean_key(record, mean)})"
    layout: dict[str, int] = {}
    for key in ("tensor_parallel", "pipeline_parallel"):
        value = _deployment(record, metadata, key)
        if not (isinstance(value, int | str) and str(value).isdigit() and int(value) >= 1):
            return f"{key}: expected a whole number >= 1, got {value!r}"
        layout[key] = int(value)
    for key in ("gpu", "model"):
        if not _deployment(record, metadata, key):
            return (f"no {key} in the file: add it when benchmarking (--metadata {key}=...) or "
                    f"give it here (batchsim replay --metadata {key}=...)")
    prompts = [p for p, _ in lengths]
    outputs = [o for _, o in lengths]
    return MeasuredCase(
        case_id=source, source=source, engine=str(_deployment(record, metadata, "engine")),
        model=str(_deployment(record, metadata, "model")),
        gpu=str(_deployment(record, metadata, "gpu")),
        quantization=str(_deployment(record, metadata, "quantization")),
        tensor_parallel=layout["tensor_parallel"],
        pipeline_parallel=layout["pipeline_parallel"],
        prompt_tokens=round(sum(prompts) / len(prompts)),
        output_tokens=round(sum(outputs) / len(outputs)), concurrency=concurrency,
        ttft_s=measured["ttft_mean"], tpot_s=measured["tpot_mean"],
        request_lengths=tuple(lengths), measured=measured, request_rate=rate,
        burstiness=burstiness)


def _request_lengths(record: Mapping[str, Any]) -> list[tuple[int, int]] | str:
    """(prompt, output) tokens per request in send order, or why they are not known."""
    inputs, outputs = record.get("input_lens"), record.get("output_lens")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        return _fixed_lengths(record)
    if len(inputs) != len(outputs) or not inputs:
        return (f"input_lens and output_lens: expected one entry per request, got "
                f"{len(inputs)} and {len(outputs)}")
    errors = [e for e in record.get("errors") or [] if e]
    if errors:
        return (f"{len(errors)} of {len(inputs)} requests failed in the benchmark (first: "
                f"{str(errors[0])[:80]!r}): a replay would not send the same load")
    lengths = []
    for index, (prompt, output) in enumerate(zip(inputs, outputs, strict=True)):
        if not (_whole(prompt) and _whole(output)):
            return (f"request {index}: expected whole token counts >= 1, got input {prompt!r}, "
                    f"output {output!r}")
        lengths.append((int(prompt), int(output)))
    return lengths


def _fixed_lengths(record: Mapping[str, Any]) -> list[tuple[int, int]] | str:
    """SGLang's random dataset with a range ratio of 1 sends fixed lengths; anything else
    needs the per-request lengths."""
    completed = record.get("completed")
    fixed = (record.get("random_range_ratio") == 1 and _whole(record.get("random_input_len"))
             and _whole(record.get("random_output_len")) and _whole(completed))
    if not fixed:
        return ("no per-request lengths (input_lens, output_lens): save them with "
                "`vllm bench serve --save-detailed` or `bench_serving --output-details`")
    assert isinstance(completed, int)
    return [(int(record["random_input_len"]), int(record["random_output_len"]))] * completed


def _pacing(record: Mapping[str, Any], requests: int,
            ) -> tuple[float | None, float, int] | str:
    """(request rate or None for a closed loop, burstiness, concurrency)."""
    rate = record.get("request_rate", "inf")
    rate = math.inf if rate in ("inf", None) else rate
    if not isinstance(rate, int | float) or not rate > 0:
        return f"request_rate: expected a number > 0 or 'inf', got {record.get('request_rate')!r}"
    burstiness = record.get("burstiness", 1.0)
    if not isinstance(burstiness, int | float) or not 0 < burstiness < math.inf:
        return f"burstiness: expected a number > 0, got {burstiness!r}"
    limit = record.get("max_concurrency")
    if limit is not None and not (_whole(limit)):
        return f"max_concurrency: expected a whole number >= 1, got {limit!r}"
    if math.isinf(rate):  # every request sent at once, `limit` of them in flight
        return None, 1.0, min(requests, int(limit) if limit is not None else requests)
    if limit is not None and int(limit) < requests:
        return ("request_rate with max_concurrency: the client's own queue, which holds a "
                "request back until one of its slots frees, is not modelled")
    return float(rate), float(burstiness), requests


def _figures(record: Mapping[str, Any]) -> dict[str, float]:
    """Every latency statistic and throughput the file reports, in seconds and per second."""
    keys = _LATENCY_KEYS[client_of(record)]
    figures: dict[str, float] = {}
    for latency, name in keys.items():
        for statistic in STATISTICS:
            value = record.get(f"{_STATISTIC_KEYS[statistic]}_{name}_ms")
            if isinstance(value, int | float) and _number(value):
                figures[f"{latency}_{statistic}"] = float(value) / 1000.0
    for throughput in THROUGHPUTS:
        if _number(record.get(throughput)):
            figures[throughput] = float(record[throughput])
    return figures


def _mean_key(record: Mapping[str, Any], mean: str) -> str:
    latency = mean.split("_")[0]
    return f"mean_{_LATENCY_KEYS[client_of(record)][latency]}_ms"


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)
