"""Small results folders written by hand, shaped like `batchsim run`'s, for report tests.

They take milliseconds to write and let a test remove exactly the file or column it is about.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_delay_s")


def _distribution(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return dict.fromkeys(("mean", "p50", "p90", "p99", "p999"))
    return {"mean": float(values.mean()),
            **{key: float(np.percentile(values, q))
               for key, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9))}}


def arm_requests(arm: str, n: int, rejected: int, scale: float, seed: int) -> pd.DataFrame:
    """n requests, the last `rejected` of them rejected for a full queue."""
    rng = np.random.default_rng(seed)
    served = np.arange(n) < n - rejected
    ttft = np.where(served, rng.lognormal(np.log(0.05 * scale), 0.8, n), np.nan)
    tpot = np.where(served, rng.normal(0.008, 0.001, n), np.nan)
    e2e = ttft + np.where(served, 100 * tpot, np.nan)
    return pd.DataFrame({
        "arm": arm, "request_id": np.arange(n), "arrival_s": np.linspace(0.0, 60.0, n),
        "prompt_tokens": 256, "output_tokens": 101, "finished": served, "rejected": ~served,
        "reject_kind": np.where(served, "", "queue_full"),
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "queue_delay_s": ttft / 2,
        "preemptions": 0,
    })


def arm_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    done = requests[requests["finished"]]
    rejected = int(requests["rejected"].sum())
    metrics: dict[str, Any] = {name: _distribution(done[name].to_numpy())
                               for name in LATENCIES if name in done}
    metrics["itl_s"] = metrics["tpot_s"]
    metrics.update({
        "measured_requests": len(requests), "completed": len(done), "rejected": rejected,
        "rejected_by_reason": {"queue_full": rejected} if rejected else {},
        "request_throughput_rps": len(done) / 60.0, "output_throughput_tps": 101 * len(done) / 60,
        "total_throughput_tps": 357 * len(done) / 60, "goodput_rps": len(done) / 60.0,
        "slo_attainment": len(done) / len(requests), "preemptions": 0,
        "preemptions_per_1000_requests": 0.0, "recomputed_token_fraction": 0.0,
        "kv_utilization": {"mean": 0.4, "max": 0.9}, "mean_batch_size": 12.0,
        "gpu_busy_fraction": 0.8, "slo_met": {"ttft_p99_s": True, "tpot_p99_s": True},
    })
    return metrics


def arm_timeseries(arm: str, seconds: int) -> pd.DataFrame:
    t = np.arange(seconds, dtype=float)
    return pd.DataFrame({"arm": arm, "t_start_s": t, "batch_size": 10 + np.sin(t),
                         "num_waiting": t % 7, "kv_utilization_mean": 0.5 + 0.3 * np.cos(t),
                         "preemptions": 0})


def write_folder(folder: Path, arms: dict[str, int], n: int = 200,
                 extra_metrics: dict[str, Any] | None = None) -> Path:
    """A results folder with one arm per entry of `arms` (name → rejected requests)."""
    folder.mkdir(parents=True, exist_ok=True)
    requests = [arm_requests(name, n, rejected, scale=1 + i, seed=i)
                for i, (name, rejected) in enumerate(arms.items())]
    rows = [{"arm": name, "point": {}, "metrics": {**arm_metrics(frame), **(extra_metrics or {})}}
            for name, frame in zip(arms, requests, strict=True)]
    summary = {"config": {"name": "synthetic", "seed": 1, "warmup_s": 0.0, "cooldown_s": 0.0,
                          "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05}},
               "versions": {"batchsim": "test"},
               "deployment": {"model": "m", "hardware": "g", "hardware_calibrated": True,
                              "memory": "memory plan", "traffic": "synthetic traffic"},
               "rows": rows}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    pd.concat(requests, ignore_index=True).to_parquet(folder / "requests.parquet", index=False)
    series = [arm_timeseries(name, 60) for name in arms]
    pd.concat(series, ignore_index=True).to_parquet(folder / "timeseries.parquet", index=False)
    return folder
