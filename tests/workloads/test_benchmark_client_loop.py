"""A closed loop as benchmark clients run one: prompts drawn from a pool of distinct prompts
(`arrivals.prompt_pool`: the entries dealt in shuffled passes, each keeping its own length,
and repeats that a prefix cache can hit) and a drained warm-up (`arrivals.drain_after`)."""

from __future__ import annotations

from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

from batchsim.apps.api import run
from batchsim.experiment.schema import WorkloadConfig
from batchsim.experiment.traffic import build_traffic
from batchsim.sim.traffic import ClosedLoopTraffic


def _traffic(pool: int | None, seed: int = 3) -> ClosedLoopTraffic:
    config = WorkloadConfig.model_validate({
        "arrivals": {"kind": "closed_loop", "concurrency": 4, "prompt_pool": pool},
        "prompt_tokens": {"kind": "uniform", "low": 100, "high": 900},
        "output_tokens": {"kind": "fixed", "value": 8}, "num_requests": 60})
    built = build_traffic(config, seed=seed, base_dir=Path("."), max_model_len=4096)
    assert isinstance(built.traffic, ClosedLoopTraffic)
    return built.traffic


def test_each_pass_deals_every_entry_once_and_an_entry_keeps_its_length():
    traffic = _traffic(pool=5)
    assert traffic.prompt_entries is not None
    entries = list(islice(traffic.prompt_entries(), 30))
    lengths = list(islice(traffic.lengths(), 30))
    for start in range(0, 30, 5):
        assert sorted(entries[start:start + 5]) == [0, 1, 2, 3, 4]
    assert entries[:5] != entries[5:10] or entries[5:10] != entries[10:15]  # reshuffled
    length_of: dict[int, int] = {}
    for entry, (prompt, _) in zip(entries, lengths, strict=True):
        assert length_of.setdefault(entry, prompt) == prompt
    assert len(set(length_of.values())) > 1
    # The same seed deals the same entries; without a pool the lengths are the usual ones.
    assert list(islice(_traffic(pool=5).prompt_entries(), 30)) == entries  # type: ignore[misc]
    assert _traffic(pool=None).prompt_entries is None


def _experiment(pool: int | None, caching: bool) -> dict[str, Any]:
    return {"name": "pool", "seed": 1, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "kv_cache": {"prefix_caching": caching},
            "workload": {"arrivals": {"kind": "closed_loop", "concurrency": 4,
                                      "prompt_pool": pool},
                         "prompt_tokens": {"kind": "fixed", "value": 1000},
                         "output_tokens": {"kind": "fixed", "value": 20},
                         "num_requests": 40},
            "policies": [{"name": "arm", "kind": "chunked_prefill"}]}


def test_repeated_prompts_hit_the_prefix_cache_once_they_are_in_it():
    [pooled] = run(_experiment(pool=4, caching=True)).result.arms
    [fresh] = run(_experiment(pool=None, caching=True)).result.arms
    requests = pooled.requests.sort_values("arrival_s", kind="stable")
    cached = requests["cached_tokens"].to_numpy()
    assert (cached[:4] == 0).all()  # the first pass computes every entry
    assert (cached[4:] == 992).all()  # then all but the last, partial block of 16 is cached
    assert pooled.metrics["ttft_s"]["mean"] < fresh.metrics["ttft_s"]["mean"]
    assert Counter(fresh.requests["cached_tokens"]) == Counter({0: 40})


def test_after_a_drained_warm_up_the_measured_requests_start_together():
    experiment = _experiment(pool=None, caching=False)
    experiment["workload"]["arrivals"]["drain_after"] = 8
    [arm] = run(experiment).result.arms
    requests = arm.requests.sort_values("arrival_s", kind="stable")
    warm, measured = requests.iloc[:8], requests.iloc[8:]
    last_warm_end = warm["finish_s"].max()
    assert (measured["arrival_s"] >= last_warm_end).all()
    assert (measured["arrival_s"].iloc[:4] == last_warm_end).all()  # one wave of 4 users
    [loose] = run(_experiment(pool=None, caching=False)).result.arms
    assert loose.requests["arrival_s"].sort_values().iloc[8] < last_warm_end
