"""Autoscaled arms (docs/how-to/autoscaling.md): the pool stays within its bounds, no request
is lost to a drain, GPU-hours are the integral of the replicas paid for (cold starts
included), and on a constant load with no cold start the autoscaler settles where a fixed-size
sweep says the target is first met."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.validation.experiment_builder import base_experiment, run_dict


def _timeline(metrics: dict[str, Any]) -> dict[str, np.ndarray]:
    return {key: np.asarray(values, dtype=float)
            for key, values in metrics["autoscaler"]["timeline"].items()}


def _replica_seconds(timeline: dict[str, np.ndarray], start: float, end: float) -> float:
    """∫ (serving + starting + draining) dt over [start, end], segment by segment."""
    t = timeline["t_s"]
    paid = timeline["serving"] + timeline["starting"] + timeline["draining"]
    total = 0.0
    for k in range(t.size):
        upto = t[k + 1] if k + 1 < t.size else np.inf
        total += paid[k] * max(0.0, min(upto, end) - max(t[k], start))
    return total


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bounds=st.sampled_from([(0, 0, 2), (0, 2, 4), (1, 1, 3), (2, 3, 5)]),
       metric=st.sampled_from([("outstanding", 2.0), ("outstanding", 8.0),
                               ("utilization", 0.6)]),
       interval=st.sampled_from([0.2, 1.0]), cold=st.sampled_from([0.0, 0.5, 2.0]),
       down=st.sampled_from([0.0, 1.0]), rate=st.floats(2.0, 40.0),
       router=st.sampled_from(["round_robin", "least_outstanding", "shared_queue"]),
       kind=st.sampled_from(["continuous", "static"]), seed=st.integers(0, 100))
def test_autoscaling_invariants(tmp_path: Path, bounds: tuple[int, int, int],
                                metric: tuple[str, float], interval: float, cold: float,
                                down: float, rate: float, router: str, kind: str,
                                seed: int) -> None:
    low, initial, high = bounds
    exp = base_experiment(
        seed=seed, router=router, warmup_s=1.0, pricing={"h100-sxm": 2.0},
        workload={"arrivals": {"kind": "gamma", "rate": rate, "cv": 2.5},
                  "prompt_tokens": {"kind": "lognormal", "mean": 300, "cv": 1.0},
                  "output_tokens": {"kind": "geometric", "mean": 60}, "num_requests": 120},
        policies=[{"name": "auto", "kind": kind, "autoscaler": {
            "min_replicas": low, "initial_replicas": initial, "max_replicas": high,
            "metric": metric[0], "target": metric[1], "interval_s": interval,
            "cold_start_s": cold, "scale_down_window_s": down}}],
    )
    arm = run_dict(tmp_path, exp).arms[0]
    timeline = _timeline(arm.metrics)
    committed = timeline["serving"] + timeline["starting"]
    assert committed.min() >= low and committed.max() <= high
    assert (committed + timeline["draining"]).max() <= high
    # Every request ended, none rejected: a drain finishes what its replica holds, and an
    # arrival with no replica serving waits for one.
    assert len(arm.requests) == 120 and arm.requests["finished"].all()
    start = 1.0
    end = start + arm.metrics["window_s"]
    gpu_hours = _replica_seconds(timeline, start, end) / 3600.0
    cost = arm.metrics["cost"]
    assert np.isclose(cost["gpu_hours"], gpu_hours, rtol=1e-9, atol=1e-15)
    assert np.isclose(cost["usd"], 2.0 * gpu_hours, rtol=1e-9, atol=1e-15)
    series = arm.timeseries
    assert {"replicas_serving", "replicas_starting", "replicas_draining"} <= set(series)
    assert series["replicas_serving"].max() <= high + 1e-9  # bin means, rounded


def _constant_load(**keys: Any) -> dict[str, Any]:
    """One request every 0.2 s, each alone on its replica for about 0.4 s (one sequence at a
    time, no engine costs): about two replicas busy on average."""
    return base_experiment(
        engine="none", warmup_s=40.0, cooldown_s=5.0,
        workload={"arrivals": {"kind": "constant", "rate": 5.0},
                  "prompt_tokens": {"kind": "fixed", "value": 256},
                  "output_tokens": {"kind": "fixed", "value": 64}, "duration_s": 160.0},
        **keys)


def test_constant_load_settles_where_the_fixed_sweep_first_meets_the_target(
        tmp_path: Path) -> None:
    target = 0.8
    arm = {"name": "one-at-a-time", "kind": "continuous", "max_num_seqs": 1}
    busy = {}
    for replicas in range(2, 6):
        fixed = run_dict(tmp_path, _constant_load(replicas=replicas, policies=[arm]))
        busy[replicas] = fixed.arms[0].metrics["gpu_busy_fraction"]
    smallest = min(n for n, fraction in busy.items() if fraction <= target)
    scaler = {"min_replicas": 1, "max_replicas": 6, "metric": "utilization",
              "target": target, "interval_s": 5.0, "cold_start_s": 0.0,
              "scale_down_window_s": 10.0}
    scaled = run_dict(tmp_path, _constant_load(policies=[{**arm, "autoscaler": scaler}]))
    block = scaled.arms[0].metrics["autoscaler"]
    timeline = _timeline(scaled.arms[0].metrics)
    # Settled: from the warm-up on, the pool holds the sweep's answer.
    after = timeline["t_s"] >= 40.0
    before = timeline["serving"][timeline["t_s"] < 40.0][-1]
    assert before == smallest and (timeline["serving"][after] == smallest).all(), \
        (busy, block)
    assert block["serving_min"] == block["serving_max"] == smallest


def test_an_arrival_at_a_pool_scaled_to_zero_waits_for_a_cold_start(tmp_path: Path) -> None:
    """Never dropped: it starts a replica at once and its TTFT includes the 3 s load."""
    scaler = {"min_replicas": 0, "max_replicas": 2, "interval_s": 1.0, "cold_start_s": 3.0,
              "scale_down_window_s": 0.0}
    exp = base_experiment(engine="none", workload={
        "arrivals": {"kind": "constant", "rate": 0.1},
        "prompt_tokens": {"kind": "fixed", "value": 128},
        "output_tokens": {"kind": "fixed", "value": 16}, "num_requests": 3},
        policies=[{"name": "zero", "kind": "continuous", "autoscaler": scaler}])
    arm = run_dict(tmp_path, exp).arms[0]
    requests = arm.requests
    assert requests["finished"].all() and len(requests) == 3
    assert (requests["ttft_s"] > 3.0).all() and (requests["ttft_s"] < 3.5).all()
    timeline = _timeline(arm.metrics)
    # Each arrival (every 10 s) starts the replica that the evaluation after the previous
    # request's finish stopped: starting at 0, serving at 3, stopped at 4 (no down window).
    assert list(timeline["t_s"][:4]) == [0.0, 3.0, 4.0, 10.0]
    assert list(timeline["starting"][:4]) == [1, 0, 0, 1]
    assert list(timeline["serving"][:4]) == [0, 1, 0, 0]
    assert arm.metrics["autoscaler"]["scale_ups"] == 3
