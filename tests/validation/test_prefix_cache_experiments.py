"""The shipped prefix-caching and diurnal experiments load, and a reduced run of each shows
its effect: cached prefixes cut TTFT; replicas sized for the peak beat those for the mean."""

from __future__ import annotations

from pathlib import Path

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def test_mooncake_prefix_cache_hits_and_cuts_ttft_on_its_first_requests() -> None:
    exp, base_dir = load_experiment(EXPERIMENTS / "mooncake_prefix_cache.yaml",
                                    ["workload.num_requests=300"])
    no_cache, cache = run_experiment(exp, base_dir).arms
    assert "prefix_cache" not in no_cache.metrics
    hits = cache.metrics["prefix_cache"]
    assert isinstance(hits, dict) and hits["hit_rate_tokens"] > 0.02
    assert cache.metrics["ttft_s"]["mean"] < no_cache.metrics["ttft_s"]["mean"]


def test_diurnal_day_with_peak_sized_replicas_cuts_tail_ttft() -> None:
    """Played 5x faster than shipped, the day's backlog at the peak is small; the shipped
    run's SLO attainment is in docs/how-to/prefix-caching.md."""
    ttft_p99 = {}
    for replicas in (2, 5):
        exp, base_dir = load_experiment(
            EXPERIMENTS / "diurnal_day.yaml",
            # the whole day, played 5x faster still (173 s)
            ["sweep=null", f"replicas={replicas}", "workload.arrivals.time_scale=0.002",
             "workload.duration_s=172.8"])
        [arm] = run_experiment(exp, base_dir).arms
        assert arm.metrics["rejected"] == 0
        ttft_p99[replicas] = arm.metrics["ttft_s"]["p99"]
    assert ttft_p99[5] < ttft_p99[2], ttft_p99
