"""A disaggregated arm's two pools scaled separately (sim/disaggregated.py, sim/pool_signals.py):
each pool stays within its bounds, no request is lost while a worker drains, each pool's
GPU-hours are the integral of its replicas over time (cold starts and drains included), and a
drained prefill replica keeps running until its prompts' KV has crossed the link."""

from __future__ import annotations

import math
from collections.abc import Generator
from pathlib import Path

import simpy
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from batchsim.experiment.deployment import resolve_deployment
from batchsim.experiment.disaggregation import build_disaggregated
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.schema import DisaggregatedArm
from batchsim.experiment.traffic import build_traffic
from batchsim.sim.replica_pool import SlotState
from tests.validation.experiment_builder import base_experiment, run_dict

ROLES = ("prefill", "decode")

prefill_scalers = st.sampled_from([
    {"min_replicas": 0, "initial_replicas": 0, "max_replicas": 2, "metric": "ttft",
     "target": 0.05},
    {"min_replicas": 1, "initial_replicas": 2, "max_replicas": 3, "metric": "ttft",
     "target": 0.5},
    {"min_replicas": 1, "max_replicas": 3, "metric": "outstanding", "target": 1.0},
])
decode_scalers = st.sampled_from([
    {"min_replicas": 1, "max_replicas": 3, "metric": "itl", "target": 0.008},
    {"min_replicas": 2, "initial_replicas": 3, "max_replicas": 4, "metric": "itl",
     "target": 0.05},
    {"min_replicas": 1, "initial_replicas": 2, "max_replicas": 3, "metric": "kv_utilization",
     "target": 0.02},
    {"min_replicas": 1, "max_replicas": 2, "metric": "outstanding", "target": 3.0},
])


def _paid_seconds(timeline: dict[str, list[float]], start: float, end: float) -> float:
    """∫ (serving + starting + draining) dt over [start, end], segment by segment."""
    t = timeline["t_s"]
    total = 0.0
    for k, since in enumerate(t):
        upto = t[k + 1] if k + 1 < len(t) else math.inf
        overlap = min(upto, end) - max(since, start)
        if overlap > 0:
            total += overlap * sum(timeline[s][k] for s in ("serving", "starting", "draining"))
    return total


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefill=prefill_scalers, decode=decode_scalers, rate=st.floats(5.0, 60.0),
       interval=st.sampled_from([0.1, 0.3]), cold=st.sampled_from([0.0, 0.4]),
       seed=st.integers(0, 1000))
def test_each_pool_stays_in_bounds_loses_nothing_and_pays_for_what_it_ran(
        tmp_path: Path, prefill, decode, rate, interval, cold, seed) -> None:
    windows = {"interval_s": interval, "cold_start_s": cold, "scale_down_window_s": 0.6}
    arm = {"name": "pd", "kind": "disaggregated", "decode_max_num_seqs": 16,
           "kv_link": {"bandwidth_gb_s": 0.5, "latency_us": 100.0},
           "autoscaler": {"prefill": {**prefill, **windows}, "decode": {**decode, **windows}}}
    exp = base_experiment(
        seed=seed, max_model_len=2048, warmup_s=0.5, pricing={"h100-sxm": 2.0},
        workload={"arrivals": {"kind": "gamma", "rate": rate, "cv": 3.0},
                  "prompt_tokens": {"kind": "lognormal", "mean": 400, "cv": 1.0},
                  "output_tokens": {"kind": "geometric", "mean": 80}, "num_requests": 80},
        policies=[arm])
    result = run_dict(tmp_path, exp).arms[0]
    block = result.metrics["autoscaler"]
    assert isinstance(block, dict)
    # No request lost: every one of them finished, those on draining replicas included.
    assert len(result.requests) == 80 and result.requests["finished"].all()
    window = result.metrics["window_s"]
    assert isinstance(window, float)
    gpu_hours = 0.0
    for role, config in (("prefill", prefill), ("decode", decode)):
        pool, timeline = block[role], block[role]["timeline"]
        for serving, starting, draining in zip(timeline["serving"], timeline["starting"],
                                               timeline["draining"], strict=True):
            assert config["min_replicas"] <= serving + starting <= config["max_replicas"]
            assert serving + starting + draining <= config["max_replicas"]
            assert min(serving, starting, draining) >= 0
        paid = _paid_seconds(timeline, 0.5, 0.5 + window)
        assert math.isclose(pool["replica_s"], paid, rel_tol=1e-9, abs_tol=1e-9), role
        gpu_hours += paid / 3600.0  # one GPU per replica (tensor_parallel 1)
    cost = result.metrics["cost"]
    assert isinstance(cost, dict)
    assert math.isclose(cost["gpu_hours"], gpu_hours, rel_tol=1e-9)
    assert math.isclose(cost["usd"], 2.0 * gpu_hours, rel_tol=1e-9)
    # A draw that never drained a replica tests nothing new of the drains.
    assume(any(max(block[role]["timeline"]["draining"]) > 0 for role in ROLES))


def test_a_drained_prefill_replica_stops_once_its_kv_has_crossed_the_link(
        tmp_path: Path) -> None:
    """Two prefill replicas behind a slow link; at t = 0.5 s the pool is cut to one. The
    dropped replica drains: it stops only when it holds no prompt and no prompt's KV."""
    arm = {"name": "pd", "kind": "disaggregated",
           "kv_link": {"bandwidth_gb_s": 0.05, "latency_us": 10.0},
           "autoscaler": {"prefill": {"min_replicas": 1, "initial_replicas": 2,
                                      "max_replicas": 2, "metric": "outstanding",
                                      "target": 1000.0, "interval_s": 100.0},
                          "decode": {"min_replicas": 1, "max_replicas": 1,
                                     "metric": "outstanding", "interval_s": 100.0}}}
    data = base_experiment(
        max_model_len=4096, router="round_robin", policies=[arm],
        workload={"arrivals": {"kind": "poisson", "rate": 20.0},
                  "prompt_tokens": {"kind": "fixed", "value": 1000},
                  "output_tokens": {"kind": "fixed", "value": 8}, "num_requests": 30})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    exp, base_dir = load_experiment(path)
    scaled = exp.policies[0]
    assert isinstance(scaled, DisaggregatedArm)
    deployment = resolve_deployment(exp, base_dir)
    traffic = build_traffic(exp.workload, seed=exp.seed, base_dir=base_dir,
                            max_model_len=deployment.max_model_len)
    run = build_disaggregated(exp, scaled, 0, model=deployment.model, base_dir=base_dir,
                              max_model_len=deployment.max_model_len, traffic=traffic,
                              on_progress=None, engine=deployment.engine)
    simulation = run.simulation
    pool = simulation.pool
    assert pool is not None
    seen: list[tuple[float, SlotState, int]] = []

    def cut_and_watch() -> Generator[simpy.Event, object, None]:
        yield simulation.env.timeout(0.5)
        pool.scale_to(1)
        while pool.state[1] is SlotState.DRAINING:
            seen.append((simulation.env.now, pool.state[1], simulation._kv_kept[1]))
            yield simulation.env.timeout(0.01)
        seen.append((simulation.env.now, pool.state[1], simulation._kv_kept[1]))

    simulation.env.process(cut_and_watch())
    record = simulation.run()
    assert all(r.is_finished for r in record.requests) and len(record.requests) == 30
    # It drained while it still held KV waiting for the link, then stopped holding none.
    assert any(state is SlotState.DRAINING and kept > 0 for _, state, kept in seen)
    assert seen[-1][1] is SlotState.STOPPED and seen[-1][2] == 0
    stopped_at = seen[-1][0]
    handed_off = [h.transfer_end_s for h in simulation.handoffs.values()
                  if h.prefill_replica == 1]
    assert handed_off and max(handed_off) <= stopped_at
    # Nothing reached it after the cut: the router chose among the serving replica only.
    late = [h for h in simulation.handoffs.values()
            if h.prefill_replica == 1 and h.request.arrival_s > 0.5]
    assert not late
