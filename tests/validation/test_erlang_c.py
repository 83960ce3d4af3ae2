"""Several replicas behind one shared FCFS queue at batch size 1: an M/M/c queue (docs/design.md
§10.1).

One-token prompts and geometric outputs make each service a geometric number of near-equal
decode steps — nearly exponential (CV² = 1 − 1/mean). The mean wait must then match Erlang C,
Wq = C(c, a) / (c·μ − λ) with a = λ/μ, using the service rate μ measured from the simulated
requests themselves.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.validation.experiment_builder import base_experiment, run_dict

SERVERS = 3
LOAD = 0.7  # per server
MEAN_OUTPUT = 100


def erlang_c_wait(arrival_rate: float, service_rate: float, servers: int) -> float:
    """Mean time in queue of an M/M/c queue."""
    a = arrival_rate / service_rate
    top = a**servers / math.factorial(servers) * servers / (servers - a)
    bottom = sum(a**k / math.factorial(k) for k in range(servers)) + top
    return (top / bottom) / (servers * service_rate - arrival_rate)


def _run(tmp_path: Path, rate: float, seed: int, n: int):
    exp = base_experiment(
        seed=seed,
        replicas=SERVERS,
        router="shared_queue",
        engine="none",  # queueing theory on the bare roofline: a front end adds its own wait
        workload={
            "arrivals": {"kind": "poisson", "rate": rate},
            "prompt_tokens": {"kind": "fixed", "value": 1},
            "output_tokens": {"kind": "geometric", "mean": MEAN_OUTPUT},
            "num_requests": n,
        },
        policies=[{"name": "batch1", "kind": "continuous", "max_num_seqs": 1}],
    )
    return run_dict(tmp_path, exp).arms[0].requests


def test_erlang_c_formula_on_a_known_case() -> None:
    # c = 2, λ = 1, μ = 1: Erlang C probability 1/3, Wq = (1/3) / (2 − 1).
    assert erlang_c_wait(1.0, 1.0, 2) == pytest.approx(1.0 / 3.0)


def test_shared_queue_at_batch_one_is_mmc(tmp_path: Path) -> None:
    probe = _run(tmp_path, rate=0.01, seed=99, n=200)
    mean_service = float((probe["finish_s"] - probe["first_scheduled_s"]).mean())
    rate = LOAD * SERVERS / mean_service
    waits, predictions = [], []
    for seed in range(1, 7):
        requests = _run(tmp_path, rate, seed, 12_000)
        steady = requests[requests["arrival_s"] > 0.05 * requests["arrival_s"].max()]
        service = (steady["finish_s"] - steady["first_scheduled_s"]).to_numpy()
        predictions.append(erlang_c_wait(rate, 1.0 / service.mean(), SERVERS))
        waits.append(float(steady["queue_delay_s"].mean()))
    # No request waits while a server is free: FCFS to the first replica with room.
    assert float(np.mean(waits)) == pytest.approx(float(np.mean(predictions)), rel=0.06)
