"""A simulated arm written as `vllm bench serve --save-result --save-detailed` writes a run.

What it is for: a replay of a file batchsim wrote from a simulation must recover the simulated
numbers exactly (the round trip of the replay's reader, lengths, pacing and deployment keys),
and other tools that read vLLM's result files can read a simulation. The latency statistics
are the replay's own (`simulate.measured_figures`); per-request `itls` hold each request's gaps
as `ITLLog.gaps_by_request` keeps them (their order within a request is only partly kept).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from batchsim.apps.replay.client_figures import LATENCIES
from batchsim.apps.replay.simulate import measured_figures
from batchsim.experiment.runner import ArmResult

_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}


def vllm_bench_result(arm: ArmResult, *, model_id: str, max_concurrency: int | None,
                      request_rate: float | None = None, burstiness: float = 1.0,
                      metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The result object of `arm` (every request served, run with its token gaps); the
    `metadata` keys (gpu, tensor_parallel, engine, ...) go at the top level, as
    `vllm bench serve --metadata` puts them."""
    if arm.token_gaps is None:
        raise ValueError("the arm was run without its token gaps (run(..., keep_token_gaps=True))")
    requests = arm.requests.sort_values("arrival_s", kind="stable")
    if not bool(requests["finished"].all()):
        raise ValueError(f"arm {arm.name}: not every request was served")
    figures = measured_figures(arm, requests)
    gaps = arm.token_gaps.gaps_by_request(len(arm.requests))
    ids = requests["request_id"].tolist()
    sent = requests["arrival_s"].to_numpy(dtype=float)
    duration = float((sent + requests["e2e_s"].to_numpy(dtype=float)).max() - sent.min())
    inputs, outputs = requests["prompt_tokens"].tolist(), requests["output_tokens"].tolist()
    result: dict[str, Any] = {
        "endpoint_type": "vllm", "backend": "vllm", "label": None, "model_id": model_id,
        "tokenizer_id": model_id, "num_prompts": len(ids), **dict(metadata or {}),
        "request_rate": "inf" if request_rate is None else request_rate,
        "burstiness": burstiness, "max_concurrency": max_concurrency,
        "duration": duration, "completed": len(ids), "failed": 0,
        "total_input_tokens": sum(inputs), "total_output_tokens": sum(outputs),
        "request_throughput": figures["request_throughput"], "request_goodput": None,
        "output_throughput": figures["output_throughput"],
        "total_token_throughput": (sum(inputs) + sum(outputs)) / duration,
        "input_lens": inputs, "output_lens": outputs,
        "ttfts": requests["ttft_s"].tolist(), "itls": [gaps[i] for i in ids],
        "generated_texts": [""] * len(ids), "errors": [""] * len(ids),
    }
    pooled = {"ttft": requests["ttft_s"].to_numpy(dtype=float),
              "tpot": requests["tpot_s"].dropna().to_numpy(dtype=float),
              "itl": np.array([gap for i in ids for gap in gaps[i]], dtype=float),
              "e2e": requests["e2e_s"].to_numpy(dtype=float)}
    for latency in LATENCIES:
        name = _NAMES[latency]
        result[f"mean_{name}_ms"] = figures[f"{latency}_mean"] * 1000.0
        result[f"median_{name}_ms"] = figures[f"{latency}_p50"] * 1000.0
        result[f"std_{name}_ms"] = float(np.std(pooled[latency])) * 1000.0
        result[f"p99_{name}_ms"] = figures[f"{latency}_p99"] * 1000.0
    return result
