"""Batch size 1 turns the server into a single-server queue: check it against theory
(docs/design.md §10.1).

Pollaczek–Khinchine gives the mean wait in an M/G/1 queue, Wq = λ·E[S²] / (2·(1 − ρ)) with
ρ = λ·E[S]; fixed lengths make the service deterministic (M/D/1). The service-time moments are
measured from the simulated requests themselves (first scheduled → finished), so the check is
of the queueing dynamics, not of the cost model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.validation.experiment_builder import base_experiment, run_dict

SEEDS = range(1, 7)
REQUESTS_PER_SEED = 20_000
LOAD = 0.7


def _batch_one(tmp_path: Path, output: dict, rate: float, seed: int, n: int) -> pd.DataFrame:
    exp = base_experiment(
        seed=seed,
        workload={
            "arrivals": {"kind": "poisson", "rate": rate},
            "prompt_tokens": {"kind": "fixed", "value": 256},
            "output_tokens": output,
            "num_requests": n,
        },
        policies=[{"name": "batch1", "kind": "continuous", "max_num_seqs": 1}],
        engine="none",  # the bare roofline: a front end would reshape the Poisson arrivals
    )
    return run_dict(tmp_path, exp).arms[0].requests


def _mean_service(tmp_path: Path, output: dict) -> float:
    """Mean service time at negligible load (no queueing at all)."""
    requests = _batch_one(tmp_path, output, rate=0.01, seed=99, n=400)
    assert (requests["queue_delay_s"] == 0).all()
    return float((requests["finish_s"] - requests["first_scheduled_s"]).mean())


def _pk_check(tmp_path: Path, output: dict) -> tuple[float, float]:
    """Mean simulated wait and mean P-K prediction over several seeds, warm-up dropped."""
    rate = LOAD / _mean_service(tmp_path, output)
    waits, predictions = [], []
    for seed in SEEDS:
        requests = _batch_one(tmp_path, output, rate, seed, REQUESTS_PER_SEED)
        steady = requests[requests["arrival_s"] > 0.05 * requests["arrival_s"].max()]
        service = (steady["finish_s"] - steady["first_scheduled_s"]).to_numpy()
        rho = rate * service.mean()
        predictions.append(rate * float(np.mean(service**2)) / (2.0 * (1.0 - rho)))
        waits.append(float(steady["queue_delay_s"].mean()))
    return float(np.mean(waits)), float(np.mean(predictions))


def test_fixed_lengths_at_batch_one_is_md1(tmp_path: Path) -> None:
    output = {"kind": "fixed", "value": 4}
    requests = _batch_one(tmp_path, output, rate=1.0, seed=3, n=300)
    service = (requests["finish_s"] - requests["first_scheduled_s"]).to_numpy()
    assert service.std() < 1e-9 * service.mean()  # deterministic service
    simulated, theory = _pk_check(tmp_path, output)
    assert simulated == pytest.approx(theory, rel=0.05)


def test_geometric_outputs_at_batch_one_is_mg1(tmp_path: Path) -> None:
    simulated, theory = _pk_check(tmp_path, {"kind": "geometric", "mean": 4})
    assert simulated == pytest.approx(theory, rel=0.05)


def test_littles_law_holds_on_a_continuous_run(tmp_path: Path) -> None:
    """Time-average number in system (from the policy's queues) = throughput × mean latency."""
    exp = base_experiment(
        engine="none",  # the policy's queues are the whole system: no front end before them
        workload={
            "arrivals": {"kind": "gamma", "rate": 20.0, "cv": 2.0},
            "prompt_tokens": {"kind": "lognormal", "mean": 600, "cv": 1.0},
            "output_tokens": {"kind": "lognormal", "mean": 200, "cv": 1.0},
            "duration_s": 120,
        },
        kv_cache={"num_blocks": 3000},  # small enough to preempt: queues must still balance
    )
    result = run_dict(tmp_path, exp)
    arm = result.arms[0]
    requests, series = arm.requests, arm.timeseries
    end = float(requests["finish_s"].max())
    bin_s = exp.get("output", {}).get("timeseries_bin_s", 1.0)
    time_average_in_system = float(series["in_system"].sum()) * bin_s / end
    throughput = len(requests) / end
    mean_latency = float(requests["e2e_s"].mean())
    assert arm.metrics["preemptions"] > 0
    assert time_average_in_system == pytest.approx(throughput * mean_latency, rel=0.02)
