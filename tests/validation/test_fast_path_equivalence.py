"""The fast path (many decode steps per event) gives the results of stepping one by one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from batchsim.apps.engine_fit.fit import profile_yaml, with_costs
from batchsim.experiment.engine_profile import load_engine_profile
from batchsim.experiment.runner import ExperimentResult
from tests.validation.experiment_builder import base_experiment, run_dict

arms = st.sampled_from([
    {"name": "arm", "kind": "continuous", "max_num_seqs": 64},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 16, "preemption": "swap"},
    {"name": "arm", "kind": "static", "max_batch_size": 8, "max_output_tokens": 400},
    {"name": "arm", "kind": "static", "max_batch_size": 16, "max_wait_s": 0.2,
     "max_output_tokens": 400},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 64},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 16,
     "long_prefill_token_threshold": 128, "preemption": "swap"},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 32,
     "admission": {"max_queue": 6, "max_predicted_wait_s": 0.3, "wait_window": 4}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 32,
     "admission": {"max_predicted_wait_s": 0.2, "wait_window": 2}},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 64,
     "admission_reserve": {"assumed_max_new_tokens": 256}},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 64, "preemption": "swap",
     "admission_reserve": {"assumed_max_new_tokens": 128, "new_token_ratio": 0.5,
                           "min_new_token_ratio": 0.5}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 64,
     "admission": {"max_queue": 4},
     "admission_reserve": {"assumed_max_new_tokens": 300, "decay_steps": 50}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 16,
     "admission_reserve": {"assumed_max_new_tokens": 200, "new_token_ratio": 1.0,
                           "min_new_token_ratio": 1.0}},
    # SGLang's default: prefill steps alone, decodes (and their stretches) between them.
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 64,
     "mixed_prefill": False},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 16,
     "long_prefill_token_threshold": 128, "preemption": "swap", "mixed_prefill": False},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 32,
     "mixed_prefill": False, "admission": {"max_queue": 4},
     "admission_reserve": {"assumed_max_new_tokens": 300, "decay_steps": 50}},
    # SGLang's own reserve: a request being admitted reserves its whole remaining decode.
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 32,
     "mixed_prefill": False,
     "admission_reserve": {"assumed_max_new_tokens": 300, "decay_steps": 50,
                           "admitted_share": 1.0, "remaining_cap": 120}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 16,
     "mixed_prefill": False,
     "admission_reserve": {"assumed_max_new_tokens": 200, "new_token_ratio": 1.0,
                           "min_new_token_ratio": 1.0}},
])
# Weighted routers over stale signals: the snapshots are read at their own ticks, mid-stretch
# too, and must see what stepping one by one would have left (docs/design.md §2).
STALE_LOAD_ROUTER = {"kind": "weighted", "scorers": [
    {"kind": "queue_depth"}, {"kind": "kv_use"}, {"kind": "predicted_latency"}],
    "signal_delay_s": 0.5, "count_own_assignments": True}
# The tiered prefix scorer reads the tiers mid-stretch, as the evictions not yet applied
# would have left them.
TIERED_PREFIX_ROUTER = {"kind": "weighted", "scorers": [
    {"kind": "tiered_prefix_cache", "weight": 2}, {"kind": "queue_depth"}]}
STALE_PREFIX_ROUTER = {"kind": "weighted", "scorers": [
    {"kind": "prefix_cache", "weight": 2}, {"kind": "queue_depth"}],
    "signal_delay_s": 0.3, "load_balance_ties": True}
arrivals = st.one_of(
    st.builds(lambda r: {"kind": "poisson", "rate": r}, st.floats(0.5, 60.0)),
    st.builds(lambda r, cv: {"kind": "gamma", "rate": r, "cv": cv},
              st.floats(0.5, 60.0), st.floats(0.3, 4.0)),
    st.builds(lambda c, t: {"kind": "closed_loop", "concurrency": c, "think_time_s": t},
              st.integers(1, 48), st.sampled_from([0.0, 0.05, 0.7])),
)


def _same_number(a: object, b: object, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _same_number(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):  # an autoscaler's timeline
        assert isinstance(b, list) and len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_number(x, y, f"{where}[{index}]")
    elif isinstance(a, bool | int | str) or a is None:
        assert a == b, where  # integers, flags and labels must be identical
    else:
        assert isinstance(a, float) and isinstance(b, float), where
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)


def _same_table(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for column in a.columns:
        x, y = a[column].to_numpy(), b[column].to_numpy()
        if x.dtype.kind == "f":
            assert np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True), column
        else:
            assert (x == y).all(), column


def _random_workload(arrival: dict, prompt_mean: float, output_mean: float) -> dict:
    return {
        "arrivals": arrival,
        "prompt_tokens": {"kind": "lognormal", "mean": prompt_mean, "cv": 1.0},
        "output_tokens": {"kind": "geometric", "mean": output_mean},
        "num_requests": 60,
    }


def _assert_paths_agree(tmp_path: Path, exp: dict) -> ExperimentResult:
    """The fast path and stepping one by one give the same results for `exp` (returned), on
    the default engine (its API server streaming the tokens) unless `exp` names another."""
    fast = run_dict(tmp_path, exp, "simulation.fast_path=true")
    slow = run_dict(tmp_path, exp, "simulation.fast_path=false")
    _assert_equivalent(fast, slow)
    return fast


def _assert_equivalent(fast: ExperimentResult, slow: ExperimentResult) -> None:
    for f, s in zip(fast.arms, slow.arms, strict=True):
        _same_number(f.metrics, s.metrics, f.name)
        _same_table(f.requests, s.requests)
        _same_table(f.timeseries, s.timeseries)


@settings(max_examples=24, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(arm={"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 64},
         arrival={"kind": "gamma", "rate": 30.0, "cv": 3.0}, blocks=400, prompt_mean=300,
         output_mean=120, replicas=3, seed=5, router=STALE_LOAD_ROUTER)
@given(arm=arms, arrival=arrivals, blocks=st.sampled_from([None, 120, 400, 2000]),
       prompt_mean=st.integers(8, 600), output_mean=st.integers(2, 300),
       replicas=st.integers(1, 3), seed=st.integers(0, 1000),
       router=st.sampled_from(["least_outstanding", "least_kv", "shared_queue",
                               STALE_LOAD_ROUTER]))
def test_fast_path_matches_stepping_one_by_one(tmp_path: Path, arm, arrival, blocks,
                                               prompt_mean, output_mean, replicas, seed, router):
    exp = base_experiment(
        seed=seed,
        max_model_len=2048,
        replicas=replicas,
        router=router,
        kv_cache={"num_blocks": blocks},
        workload=_random_workload(arrival, prompt_mean, output_mean),
        policies=[arm],
        output={"timeseries_bin_s": 0.5},
    )
    _assert_paths_agree(tmp_path, exp)


unmixed_arms = st.builds(
    lambda seqs, extra, threshold, preemption: {
        "name": "arm", "kind": "chunked_prefill", "mixed_prefill": False,
        "max_num_seqs": seqs, "token_budget": seqs + extra,
        "long_prefill_token_threshold": threshold, "preemption": preemption},
    st.sampled_from([4, 16, 64]), st.sampled_from([0, 64, 448]),
    st.sampled_from([None, 32, 128]), st.sampled_from(["recompute", "swap"]),
)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arm=unmixed_arms, arrival=arrivals, blocks=st.sampled_from([None, 60, 120, 400]),
       prompt_mean=st.integers(8, 600), output_mean=st.integers(2, 300),
       replicas=st.integers(1, 2), seed=st.integers(0, 1000),
       router=st.sampled_from(["least_outstanding", "least_kv", "shared_queue"]))
def test_fast_path_matches_stepping_one_by_one_without_mixed_prefill(
        tmp_path: Path, arm, arrival, blocks, prompt_mean, output_mean, replicas, seed, router):
    """SGLang's unmixed steps (docs/design.md §4): a decode stretch runs only while no prefill
    can be scheduled, and a waiting request it left blocked stays blocked through it."""
    exp = base_experiment(
        seed=seed, max_model_len=2048, replicas=replicas, router=router,
        kv_cache={"num_blocks": blocks},
        workload=_random_workload(arrival, prompt_mean, output_mean),
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    _assert_paths_agree(tmp_path, exp)


ordered_arms = st.sampled_from([
    {"name": "arm", "kind": "continuous", "max_num_seqs": 16,
     "ordering": {"kind": "shortest_prompt_first"}},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 8, "preemption": "swap",
     "ordering": {"kind": "priority", "aging_s": 0.5}},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 64, "admission": {"max_queue": 6},
     "ordering": {"kind": "priority"}},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 32,
     "admission_reserve": {"assumed_max_new_tokens": 256, "decay_steps": 50},
     "ordering": {"kind": "fair_share", "output_token_weight": 1.0}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 16,
     "ordering": {"kind": "fair_share"}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 8,
     "long_prefill_token_threshold": 128, "preemption": "swap",
     "ordering": {"kind": "shortest_prompt_first", "aging_tokens_per_s": 2000}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 16,
     "mixed_prefill": False, "ordering": {"kind": "fair_share"}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 8,
     "mixed_prefill": False, "ordering": {"kind": "priority", "aging_s": 0.5}},
    # SLO classes: priority victims re-queued by priority, and a gateway shedding a class.
    {"name": "arm", "kind": "continuous", "max_num_seqs": 32, "preemption_victim": "priority",
     "ordering": {"kind": "priority"},
     "gateway": {"shed": [{"tenant": "t1", "max_queued_per_replica": 2}]}},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 16,
     "preemption": "swap", "preemption_victim": "priority",
     "ordering": {"kind": "priority", "aging_s": 0.5},
     "gateway": {"shed": [{"tenant": "t0", "max_queued_per_replica": 0}]}},
    {"name": "arm", "kind": "static", "max_batch_size": 8, "max_output_tokens": 400,
     "ordering": {"kind": "fair_share"}},
    {"name": "arm", "kind": "static", "max_batch_size": 16, "max_wait_s": 0.2,
     "max_output_tokens": 400, "ordering": {"kind": "priority", "aging_s": 0.2}},
])
tenant_arrivals = st.one_of(
    st.builds(lambda r: {"kind": "poisson", "rate": r}, st.floats(0.5, 40.0)),
    st.builds(lambda r, cv: {"kind": "gamma", "rate": r, "cv": cv},
              st.floats(0.5, 40.0), st.floats(0.3, 4.0)),
)
tenants = st.lists(
    st.builds(lambda arrivals, prompt, output, priority: {
        "arrivals": arrivals, "priority": priority,
        "prompt_tokens": {"kind": "lognormal", "mean": prompt, "cv": 1.0},
        "output_tokens": {"kind": "geometric", "mean": output}},
        tenant_arrivals, st.integers(8, 600), st.integers(2, 300), st.integers(0, 3)),
    min_size=2, max_size=3)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arm=ordered_arms, tenant_list=tenants, blocks=st.sampled_from([None, 120, 400, 2000]),
       replicas=st.integers(1, 3), seed=st.integers(0, 1000),
       router=st.sampled_from(["round_robin", "least_outstanding", "least_kv"]))
# A static batch streams no message for a finished request's padding slot (it once did in
# a stretch, one message each, but not stepping one by one).
@example(arm={"name": "arm", "kind": "static", "max_batch_size": 16, "max_wait_s": 0.2,
              "max_output_tokens": 400, "ordering": {"kind": "priority", "aging_s": 0.2}},
         tenant_list=[{"arrivals": {"kind": "poisson", "rate": 1.0}, "priority": 0,
                       "prompt_tokens": {"kind": "lognormal", "mean": 8, "cv": 1.0},
                       "output_tokens": {"kind": "geometric", "mean": 2}}] * 2,
         blocks=None, replicas=1, seed=0, router="round_robin")
def test_fast_path_matches_stepping_one_by_one_under_every_ordering(
        tmp_path: Path, arm, tenant_list, blocks, replicas, seed, router):
    """Orderings and tenants: aging keys are fixed at push, fair-share counters are functions
    of integer token totals, and fair share steps one by one while two tenants wait."""
    named = [{"name": f"t{i}", **tenant} for i, tenant in enumerate(tenant_list)]
    exp = base_experiment(
        seed=seed, max_model_len=2048, replicas=replicas, router=router,
        kv_cache={"num_blocks": blocks},
        workload={"tenants": named, "num_requests": 60},
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    _assert_paths_agree(tmp_path, exp)


disaggregated_arms = st.builds(
    lambda pools, prefill, decode, link: {"name": "arm", "kind": "disaggregated",
                                          "prefill_replicas": pools[0],
                                          "decode_replicas": pools[1], **prefill, **decode,
                                          "kv_link": link},
    st.sampled_from([(1, 1), (1, 2), (2, 1), (2, 3)]),
    st.sampled_from([{}, {"prefill_token_budget": 2048, "prefill_max_num_seqs": 4},
                     {"prefill_chunked": True, "prefill_token_budget": 256}]),
    st.sampled_from([{}, {"decode_max_num_seqs": 4},
                     {"decode_max_num_seqs": 8, "decode_preemption": "swap"}]),
    st.builds(lambda bandwidth, latency, layerwise: {
        "bandwidth_gb_s": bandwidth, "latency_us": latency, "layerwise": layerwise},
        st.sampled_from([None, 0.05, 5.0, 50.0]), st.sampled_from([0.0, 10.0, 5000.0]),
        st.booleans()),
)


@settings(max_examples=18, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arm=disaggregated_arms, arrival=arrivals, blocks=st.sampled_from([None, 120, 400]),
       prompt_mean=st.integers(8, 600), output_mean=st.integers(2, 300),
       seed=st.integers(0, 1000),
       router=st.sampled_from(["round_robin", "least_kv", "shared_queue"]),
       engine=st.sampled_from(["vllm", "sglang", "none"]))
def test_fast_path_matches_stepping_one_by_one_when_disaggregated(
        tmp_path: Path, arm, arrival, blocks, prompt_mean, output_mean, seed, router, engine):
    """Transfers that arrive, blocks reserved for them and prefill blocks released all cut a
    decode replica's stretch exactly as an arrival does; small caches make decode admission
    wait, slow links (0.05 GB/s) make transfers share the link. The engines' three rules for
    the client's first token (vLLM recomputes it at the decode replica, SGLang streams the
    prefill's from there, the bare roofline shows the prefill's)."""
    exp = base_experiment(
        seed=seed, max_model_len=2048, router=router, kv_cache={"num_blocks": blocks},
        engine=engine,
        workload=_random_workload(arrival, prompt_mean, output_mean),
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    _assert_paths_agree(tmp_path, exp)


prefix_arms = st.sampled_from([
    {"name": "arm", "kind": "continuous", "max_num_seqs": 32, "max_num_batched_tokens": 16384},
    {"name": "arm", "kind": "continuous", "max_num_seqs": 16, "preemption": "swap",
     "max_num_batched_tokens": 16384},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 32},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 2048, "max_num_seqs": 16,
     "long_prefill_token_threshold": 512, "preemption": "swap"},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 32,
     "mixed_prefill": False},
    {"name": "arm", "kind": "chunked_prefill", "token_budget": 2048, "max_num_seqs": 16,
     "long_prefill_token_threshold": 512, "preemption": "swap", "mixed_prefill": False},
])


def _mooncake_workload(start: float, rate: float) -> dict:
    """60 requests of the shipped Mooncake slice from `start` (prompts of at most 8,000
    tokens), replayed at `rate`: repeats that share prefixes."""
    return {
        "arrivals": {"kind": "trace", "path": "mooncake-conversation", "format": "mooncake",
                     "window_s": [start, start + 150],
                     "filter": {"max_prompt_tokens": 8000}, "target_rate": rate},
        "num_requests": 60,
    }


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(arm={"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 32},
         blocks=700, rate=1.0, start=0, replicas=1, seed=0, router="least_outstanding")
# Unmixed, a decode's block evicts a cached block of the waiting head's prefix, which lets the
# head in at the next step: that step must not be stretched over (docs/design.md §4).
@example(arm={"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 32,
              "mixed_prefill": False},
         blocks=700, rate=1.0, start=0, replicas=1, seed=0, router="least_outstanding")
@example(arm={"name": "arm", "kind": "continuous", "max_num_seqs": 32}, blocks=1500, rate=8.0,
         start=60, replicas=3, seed=2, router=STALE_PREFIX_ROUTER)
@given(arm=prefix_arms, blocks=st.sampled_from([None, 700, 1500, 4000]),
       rate=st.floats(0.5, 20.0), start=st.sampled_from([0, 60, 150]),
       replicas=st.integers(1, 3), seed=st.integers(0, 1000),
       router=st.sampled_from(["least_outstanding", "least_kv", "prefix_affinity",
                               "shared_queue", STALE_PREFIX_ROUTER]))
def test_fast_path_matches_stepping_one_by_one_with_prefix_caching(
        tmp_path: Path, arm, blocks, rate, start, replicas, seed, router):
    """Mooncake requests sharing prefixes: cached blocks evicted by decode growth count as
    free in the stretch's bounds exactly as allocation takes them, and a prefix-affinity
    router sees mid-stretch the cached blocks that stepping one by one would have left."""
    exp = base_experiment(
        seed=seed, max_model_len=16384, replicas=replicas, router=router,
        kv_cache={"num_blocks": blocks, "prefix_caching": True},
        workload=_mooncake_workload(start, rate),
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    fast = _assert_paths_agree(tmp_path, exp)
    assert fast.arms[0].metrics["prefix_cache"]["cached_tokens"] >= 0


# Lower KV tiers (a Llama-3.1-8B block of 16 tokens is 2.1 MB): a few hundred blocks each, so
# decode growth evicts into them, cascades push blocks down and admissions load them back.
kv_tiers = st.sampled_from([
    [{"kind": "cpu", "capacity_gb": 0.3, "bandwidth_gb_s": 20.0}],
    [{"kind": "cpu", "capacity_gb": 0.2, "bandwidth_gb_s": 20.0},
     {"kind": "disk", "capacity_gb": 1.0, "bandwidth_gb_s": 2.0}],
    [{"kind": "cpu", "capacity_gb": 0.0}, {"kind": "remote", "capacity_gb": 0.5}],
])


@settings(max_examples=2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(arm={"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 32,
              "mixed_prefill": False},
         tiers=[{"kind": "cpu", "capacity_gb": 0.2, "bandwidth_gb_s": 20.0},
                {"kind": "disk", "capacity_gb": 1.0, "bandwidth_gb_s": 2.0}],
         load="layerwise", blocks=700, rate=1.0, start=0, replicas=2,
         router=TIERED_PREFIX_ROUTER, seed=0)
@given(arm=prefix_arms, tiers=kv_tiers, load=st.sampled_from(["blocking", "layerwise"]),
       blocks=st.sampled_from([700, 1500]), rate=st.floats(0.5, 20.0),
       start=st.sampled_from([0, 60, 150]), replicas=st.integers(1, 2),
       router=st.sampled_from(["least_outstanding", TIERED_PREFIX_ROUTER]),
       seed=st.integers(0, 1000))
def test_fast_path_matches_stepping_one_by_one_with_kv_tiers(
        tmp_path: Path, arm, tiers, load, blocks, rate, start, replicas, router, seed):
    """Blocks a stretch's growth evicts move down the tiers in the order stepping one by one
    evicts them, and a head waiting on tier hits stops a stretch before an eviction could
    push them out (swap arms pin their blocks in a CPU tier); the tiered prefix scorer sees
    mid-stretch what stepping would have moved down or dropped."""
    exp = base_experiment(
        seed=seed, max_model_len=16384, replicas=replicas, router=router,
        kv_cache={"num_blocks": blocks, "prefix_caching": True, "tiers": tiers,
                  "tier_load": load},
        workload=_mooncake_workload(start, rate),
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    fast = _assert_paths_agree(tmp_path, exp)
    assert set(fast.arms[0].metrics["kv_tiers"]["tiers"]) == {tier["kind"] for tier in tiers}


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arm=prefix_arms, blocks=st.sampled_from([None, 300, 1000]),
       session_rate=st.floats(0.5, 8.0), think=st.sampled_from([0.0, 0.3, 2.0]),
       replicas=st.integers(1, 2), seed=st.integers(0, 1000),
       router=st.sampled_from(["least_outstanding", "prefix_affinity"]))
def test_fast_path_matches_stepping_one_by_one_with_sessions(
        tmp_path: Path, arm, blocks, session_rate, think, replicas, seed, router):
    """Multi-turn sessions reusing their earlier turns' cached blocks."""
    exp = base_experiment(
        seed=seed, max_model_len=4096, replicas=replicas, router=router,
        kv_cache={"num_blocks": blocks, "prefix_caching": True},
        workload={
            "arrivals": {"kind": "sessions", "num_sessions": 15, "session_rate": session_rate,
                         "turns": {"kind": "geometric", "mean": 3}, "think_time_s": think,
                         "system_prompt_tokens": 200},
            "prompt_tokens": {"kind": "lognormal", "mean": 150, "cv": 1.0},
            "output_tokens": {"kind": "geometric", "mean": 60},
            "duration_s": 10_000.0,
        },
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    _assert_paths_agree(tmp_path, exp)


autoscalers = st.builds(
    lambda bounds, metric, interval, cold, windows: {
        "min_replicas": bounds[0], "initial_replicas": bounds[1], "max_replicas": bounds[2],
        **metric, "interval_s": interval, "cold_start_s": cold,
        "scale_up_window_s": windows[0], "scale_down_window_s": windows[1]},
    st.sampled_from([(0, 0, 2), (0, 1, 3), (1, 1, 3), (1, 2, 3)]),
    st.sampled_from([{"metric": "outstanding", "target": 1.0},
                     {"metric": "outstanding", "target": 4.0},
                     {"metric": "utilization", "target": 0.5}]),
    st.sampled_from([0.1, 0.4]), st.sampled_from([0.0, 0.25]),
    st.sampled_from([(0.0, 0.0), (0.0, 0.5), (0.3, 1.0)]),
)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(arm={"name": "arm", "kind": "continuous", "max_num_seqs": 64},
         scaler={"min_replicas": 0, "initial_replicas": 0, "max_replicas": 2,
                 "metric": "outstanding", "target": 1.0, "interval_s": 0.1,
                 "cold_start_s": 0.25, "scale_up_window_s": 0.0, "scale_down_window_s": 0.5},
         arrival={"kind": "gamma", "rate": 20.0, "cv": 3.0}, prompt_mean=200, output_mean=80,
         seed=3, router="least_outstanding")
# The weighted router over stale snapshots: replicas join and leave its candidate set.
@example(arm={"name": "arm", "kind": "chunked_prefill", "token_budget": 256, "max_num_seqs": 64},
         scaler={"min_replicas": 1, "initial_replicas": 1, "max_replicas": 3,
                 "metric": "outstanding", "target": 1.0, "interval_s": 0.1,
                 "cold_start_s": 0.25, "scale_up_window_s": 0.0, "scale_down_window_s": 0.5},
         arrival={"kind": "gamma", "rate": 30.0, "cv": 3.0}, prompt_mean=300, output_mean=120,
         seed=5, router=STALE_LOAD_ROUTER)
@given(arm=arms, scaler=autoscalers, arrival=arrivals, prompt_mean=st.integers(8, 600),
       output_mean=st.integers(2, 300), seed=st.integers(0, 1000),
       router=st.sampled_from(["round_robin", "least_outstanding", "shared_queue",
                               STALE_LOAD_ROUTER]))
def test_fast_path_matches_stepping_one_by_one_when_autoscaled(
        tmp_path: Path, arm, scaler, arrival, prompt_mean, output_mean, seed, router):
    """Scale events (starts, cold starts, drains, scaling to zero) change only where new
    arrivals go, and the metric reads the same counts and busy seconds mid-stretch as between
    steps (docs/design.md §11): both paths take the same decisions at the same instants."""
    exp = base_experiment(
        seed=seed, max_model_len=2048, router=router,
        workload=_random_workload(arrival, prompt_mean, output_mean),
        policies=[{**arm, "autoscaler": scaler}], output={"timeseries_bin_s": 0.5},
    )
    fast = _assert_paths_agree(tmp_path, exp)
    block = fast.arms[0].metrics["autoscaler"]
    assert isinstance(block, dict)
    # A draw whose load never moved the pool tests nothing new: count only those that did.
    assume(block["scale_ups"] + block["scale_downs"] >= 1)


pool_scalers = st.builds(
    lambda prefill, decode, interval, cold: {
        "prefill": {**prefill, "interval_s": interval, "cold_start_s": cold,
                    "scale_down_window_s": 0.5},
        "decode": {**decode, "interval_s": interval, "cold_start_s": cold,
                   "scale_down_window_s": 0.5}},
    st.sampled_from([
        {"min_replicas": 0, "initial_replicas": 0, "max_replicas": 2, "metric": "ttft",
         "target": 0.05},
        {"min_replicas": 1, "max_replicas": 3, "metric": "ttft", "target": 0.2},
        {"min_replicas": 1, "max_replicas": 2, "metric": "outstanding", "target": 2.0}]),
    st.sampled_from([
        {"min_replicas": 1, "max_replicas": 3, "metric": "itl", "target": 0.008},
        {"min_replicas": 1, "initial_replicas": 2, "max_replicas": 3,
         "metric": "kv_utilization", "target": 0.05},
        {"min_replicas": 1, "max_replicas": 2, "metric": "outstanding", "target": 4.0}]),
    st.sampled_from([0.1, 0.3]), st.sampled_from([0.0, 0.25]),
)
scaled_disaggregated_arms = st.builds(
    lambda scaler, link: {"name": "arm", "kind": "disaggregated", "autoscaler": scaler,
                          "decode_max_num_seqs": 16, "kv_link": link},
    pool_scalers,
    st.sampled_from([{}, {"bandwidth_gb_s": 0.05, "latency_us": 10.0},
                     {"bandwidth_gb_s": 5.0, "latency_us": 5000.0, "layerwise": True}]),
)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(arm={"name": "arm", "kind": "disaggregated", "decode_max_num_seqs": 16,
              "kv_link": {"bandwidth_gb_s": 0.05, "latency_us": 10.0},
              "autoscaler": {
                  "prefill": {"min_replicas": 0, "initial_replicas": 0, "max_replicas": 2,
                              "metric": "ttft", "target": 0.05, "interval_s": 0.1,
                              "cold_start_s": 0.25, "scale_down_window_s": 0.5},
                  "decode": {"min_replicas": 1, "max_replicas": 3, "metric": "itl",
                             "target": 0.008, "interval_s": 0.1, "cold_start_s": 0.25,
                             "scale_down_window_s": 0.5}}},
         arrival={"kind": "gamma", "rate": 30.0, "cv": 3.0}, blocks=400, prompt_mean=300,
         output_mean=120, seed=5, router=STALE_LOAD_ROUTER)
@given(arm=scaled_disaggregated_arms, arrival=arrivals, blocks=st.sampled_from([None, 400]),
       prompt_mean=st.integers(8, 600), output_mean=st.integers(2, 300),
       seed=st.integers(0, 1000),
       router=st.sampled_from(["least_outstanding", "shared_queue", STALE_LOAD_ROUTER]))
def test_fast_path_matches_stepping_one_by_one_when_disaggregated_pools_scale(
        tmp_path: Path, arm, arrival, blocks, prompt_mean, output_mean, seed, router):
    """Each pool scales on its own signal: first tokens come at prefill steps' ends (never
    stretched), the decode pool's seconds per token and KV use are read mid-stretch as stepping
    one by one has them, and a drained decode replica's requests stay where they are
    (docs/design.md §11): both paths take the same decisions at the same instants."""
    exp = base_experiment(
        seed=seed, max_model_len=2048, router=router, kv_cache={"num_blocks": blocks},
        workload=_random_workload(arrival, prompt_mean, output_mean),
        policies=[arm], output={"timeseries_bin_s": 0.5},
    )
    fast = _assert_paths_agree(tmp_path, exp)
    block = fast.arms[0].metrics["autoscaler"]
    assert isinstance(block, dict)
    events = sum(block[role]["scale_ups"] + block[role]["scale_downs"]
                 for role in ("prefill", "decode"))
    assume(events >= 1)


def test_fast_path_matches_stepping_one_by_one_with_slo_classes(tmp_path: Path):
    """Priority victims (anywhere in the batch, re-queued by priority) and a shedding gateway
    on a cache small enough that the low class is preempted and shed; chunked prefill, so the
    decode-only stretches run between the preemptions."""
    classes = [
        {"name": "interactive", "priority": 0, "arrivals": {"kind": "poisson", "rate": 20.0},
         "prompt_tokens": {"kind": "lognormal", "mean": 128, "cv": 0.5},
         "output_tokens": {"kind": "geometric", "mean": 32}},
        {"name": "batch", "priority": 1, "arrivals": {"kind": "poisson", "rate": 20.0},
         "prompt_tokens": {"kind": "lognormal", "mean": 384, "cv": 0.5},
         "output_tokens": {"kind": "geometric", "mean": 200}},
    ]
    arm = {"name": "arm", "kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 32,
           "ordering": {"kind": "priority"}, "preemption_victim": "priority",
           "gateway": {"shed": [{"tenant": "batch", "max_queued_per_replica": 3}]}}
    exp = base_experiment(seed=5, max_model_len=2048, kv_cache={"num_blocks": 150},
                          workload={"tenants": classes, "num_requests": 120},
                          policies=[arm], output={"timeseries_bin_s": 0.5})
    fast = _assert_paths_agree(tmp_path, exp)
    requests = fast.arms[0].requests
    batch = requests[requests["tenant"] == 1]
    assert batch["preemptions"].sum() > 0 and (batch["reject_kind"] == "shed_overload").any()


def _slow_front_end(tmp_path: Path) -> str:
    """The default engine with a front end slow enough for bursts to queue at every server."""
    profile = with_costs(load_engine_profile("vllm"),
                         {"frontend_serial_s": 0.02, "frontend_stream_s": 2e-4})
    path = tmp_path / "vllm-slow-front-end.yaml"
    path.write_text(profile_yaml(profile.spec.model_dump(mode="json")), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("replicas", [1, 3])
def test_fast_path_matches_stepping_one_by_one_with_a_busy_streaming_server(
        tmp_path: Path, replicas: int):
    """Requests sent while the front end is still taking earlier ones in, beside a backlog
    of streamed tokens: each is taken in at its send time, and they reach the router in send
    order (a request takes the first server free, so none overtakes)."""
    exp = base_experiment(
        seed=5, max_model_len=2048, replicas=replicas, router="least_outstanding",
        engine=_slow_front_end(tmp_path),
        workload={**_random_workload({"kind": "gamma", "rate": 60.0, "cv": 3.0}, 300, 120),
                  "num_requests": 200},
        policies=[{"name": "arm", "kind": "continuous", "max_num_seqs": 64}])
    fast = _assert_paths_agree(tmp_path, exp)
    sent = fast.arms[0].requests.sort_values("request_id")["arrival_s"]
    assert sent.is_monotonic_increasing
    assert (sent.diff().dropna() < 0.02).mean() > 0.3  # many sent while one was taken in
