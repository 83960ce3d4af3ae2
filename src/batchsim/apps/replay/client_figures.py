"""What a benchmark client reports about a run, computed the way `vllm bench serve` does.

Latencies in seconds: TTFT, TPOT ((e2e − ttft) / (output − 1), over requests of more than one
token), ITL (every gap between two tokens of a request, pooled over requests) and E2E, each as
mean, median and p99 (numpy's linear interpolation, as the client uses); throughput in requests
and output tokens per second of the benchmark's duration (first send to last response).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATISTICS = ("mean", "p50", "p99")
THROUGHPUTS = ("request_throughput", "output_throughput")
FIGURES = tuple(f"{latency}_{statistic}" for latency in LATENCIES
                for statistic in STATISTICS) + THROUGHPUTS
"""Every figure a replay can compare, in the order the outputs list them."""


def client_figures(requests: pd.DataFrame, itl: Mapping[str, object]) -> dict[str, float]:
    """The figures of the measured `requests` (all served) of a simulated arm; `itl` is the
    arm's pooled gap distribution over the same requests (`metrics["itl_s"]`)."""
    figures: dict[str, float] = {}
    for latency in ("ttft", "tpot", "e2e"):
        values = requests[f"{latency}_s"].to_numpy(dtype=float)
        figures.update(_statistics(latency, values[~np.isnan(values)]))
    for statistic in STATISTICS:
        value = itl.get(statistic)
        if isinstance(value, float):
            figures[f"itl_{statistic}"] = value
    if len(requests):
        sent = requests["arrival_s"].to_numpy(dtype=float)
        done = sent + requests["e2e_s"].to_numpy(dtype=float)
        duration = float(done.max() - sent.min())
        if duration > 0:
            figures["request_throughput"] = len(requests) / duration
            figures["output_throughput"] = float(requests["output_tokens"].sum()) / duration
    return figures


def _statistics(latency: str, values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    return {f"{latency}_mean": float(values.mean()),
            f"{latency}_p50": float(np.median(values)),
            f"{latency}_p99": float(np.percentile(values, 99))}
