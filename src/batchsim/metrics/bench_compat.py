"""One arm's numbers under the names `vllm bench serve` gives them (docs/reference/outputs.md,
"bench_compat"), so a simulation reads side by side with a measured benchmark's result file.

Every value comes from the same measured requests as the rest of the summary; where vLLM's
client counts otherwise (its duration runs from the first request sent, ours is the
measurement window) the reference page says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Our latency columns and the name vLLM gives each.
_LATENCIES = {"ttft_s": "ttft", "tpot_s": "tpot", "e2e_s": "e2el"}
_MS = 1000.0


def latency_block(name: str, values: np.ndarray) -> dict[str, float | None]:
    """mean, median, std (numpy's, over the population, as vLLM's client takes it) and p99
    of `values` (seconds, NaN = no sample) in milliseconds; None without a sample."""
    values = values[~np.isnan(values)]
    keys = [f"{stat}_{name}_ms" for stat in ("mean", "median", "std", "p99")]
    if values.size == 0:
        return dict.fromkeys(keys)
    median, p99 = np.percentile(values, [50.0, 99.0]).tolist()
    stats = [float(values.mean()), median, float(values.std()), p99]
    return {key: stat * _MS for key, stat in zip(keys, stats, strict=True)}


def weighted_latency_block(name: str, stats: dict[str, float | None],
                           std_s: float | None) -> dict[str, float | None]:
    """`latency_block` of a sample already summarised (`summary.distribution`'s mean, p50,
    p99 in seconds, and its population standard deviation): the token gaps, too many to
    summarise twice."""
    values = (stats["mean"], stats["p50"], std_s, stats["p99"])
    keys = [f"{stat}_{name}_ms" for stat in ("mean", "median", "std", "p99")]
    return {key: None if value is None else value * _MS
            for key, value in zip(keys, values, strict=True)}


def weighted_std(values: np.ndarray, weights: np.ndarray, mean: float) -> float:
    """Population standard deviation of `values` repeated `weights` times, about `mean`."""
    # numpy's pairwise sum, not a BLAS dot: same bytes whatever the thread count.
    squares = np.add.reduce(np.square(values - mean) * weights.astype(np.float64))
    return float(np.sqrt(squares / np.add.reduce(weights, dtype=np.int64)))


def bench_compat(done: pd.DataFrame, *, measured: int, window_s: float, good: int | None,
                 itl: dict[str, float | None], itl_std_s: float | None) -> dict[str, object]:
    """The flat block: `done` the measured requests that finished, `measured` how many were
    measured, `good` those meeting every SLO target (None without an SLO), `itl` the summary's
    distribution of the measured requests' gaps and `itl_std_s` their standard deviation."""
    input_tokens = int(done["prompt_tokens"].sum())
    output_tokens = int(done["output_tokens"].sum())
    block: dict[str, object] = {
        "duration": window_s,
        "completed": len(done),
        "failed": measured - len(done),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / window_s,
        "request_goodput": None if good is None else good / window_s,
        "output_throughput": output_tokens / window_s,
        "total_token_throughput": (input_tokens + output_tokens) / window_s,
    }
    for column in ("ttft_s", "tpot_s"):
        block.update(latency_block(_LATENCIES[column], done[column].to_numpy(dtype=float)))
    block.update(weighted_latency_block("itl", itl, itl_std_s))
    block.update(latency_block("e2el", done["e2e_s"].to_numpy(dtype=float)))
    return block


def restate_goodput(metrics: dict[str, object], any_slo: bool) -> None:
    """Give `bench_compat` the arm's final `goodput_rps`: with tenants it is counted against
    each request's own tenant SLO after the summary (metrics/fairness.py); None with no SLO
    anywhere."""
    block = metrics["bench_compat"]
    assert isinstance(block, dict)
    block["request_goodput"] = metrics["goodput_rps"] if any_slo else None
